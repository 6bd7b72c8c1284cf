package blocks_test

import (
	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
)

// compile.GraphExecutor implements the executor interfaces by their method
// sets (compile does not import blocks); this fails to build if either
// side's signatures drift.
var (
	_ blocks.Executor       = (*compile.GraphExecutor)(nil)
	_ blocks.Precompiler    = (*compile.GraphExecutor)(nil)
	_ blocks.CompileCounter = (*compile.GraphExecutor)(nil)
)
