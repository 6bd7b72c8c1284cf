package compile

import "github.com/tputool/tputool/internal/errs"

// OptionError is an Options or BatchOptions value that a Runner or Batch
// cannot take (errs.OptionError, Owner "Options" or "BatchOptions"): cmd
// restates it with the flags that set the fields it names.
type OptionError = errs.OptionError
