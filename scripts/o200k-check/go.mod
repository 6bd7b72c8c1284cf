module github.com/tputool/tputool/scripts/o200k-check

go 1.26.0

require (
	github.com/pkoukk/tiktoken-go v0.1.8
	github.com/pkoukk/tiktoken-go-loader v0.0.2
	github.com/tputool/tputool v0.0.0
)

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/dlclark/regexp2/v2 v2.13.0 // indirect
	github.com/google/uuid v1.3.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/tputool/tputool => ../..
