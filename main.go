// Command tputool runs Hugging Face models on TPUs, GPUs and CPUs.
package main

import (
	"os"

	"github.com/tputool/tputool/cmd"
)

func main() {
	os.Exit(cmd.Main())
}
