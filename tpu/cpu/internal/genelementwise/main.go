// Command genelementwise writes tpu/cpu's elementwise_gen.go from the op
// table in internal/elementwisegen. go generate runs it in tpu/cpu:
//
//	go generate ./tpu/cpu
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tputool/tputool/tpu/cpu/internal/elementwisegen"
)

func main() {
	out := flag.String("o", elementwisegen.FileName, "output file")
	flag.Parse()
	src, err := elementwisegen.Render()
	if err == nil {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genelementwise:", err)
		os.Exit(1)
	}
}
