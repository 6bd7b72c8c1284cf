package chat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// ErrLimit is wrapped by the error returned when a template exceeds one of
// its limits (steps, time, output or value size, list length, memory,
// recursion or nesting depth). It wraps errs.ErrLimit, so the command exits
// with code 6.
var ErrLimit = fmt.Errorf("chat template limit exceeded: %w", errs.ErrLimit)

// Fixed limits (the others are in Options).
const (
	// maxItems caps the length of any list or dict a template builds.
	maxItems = 1 << 20
	// maxMacroDepth caps nested macro calls.
	maxMacroDepth = 64
	// maxValueDepth caps how deeply printing, tojson and comparison descend
	// into nested lists and dicts (Python's recursion limit is 1000).
	maxValueDepth = 200
	// workPerStep: builtins charge their work (bytes scanned or copied,
	// items visited) to the step budget at this many units per step, so a
	// handful of steps cannot hide an unbounded amount of work.
	workPerStep = 256
	// itemCost is the work charged for visiting, comparing or printing one
	// item of a list or dict (a byte of a string costs 1).
	itemCost = 16
	// checkEvery: the clock and the context are checked whenever this much
	// work or this many steps have passed since the last check.
	checkEvery      = 1 << 16
	checkEverySteps = 256
)

// limitError names the limit that was hit, its value and the Options field
// (or constant) that sets it.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }
func (e *limitError) Unwrap() error { return ErrLimit }

func limitf(format string, args ...any) error {
	return &limitError{msg: "limit exceeded: " + fmt.Sprintf(format, args...)}
}

// posError adds the template line to an error once: an error from a nested
// macro call already has its line and is not prefixed again.
type posError struct {
	line int
	err  error
}

func (e *posError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *posError) Unwrap() error { return e.err }

func atLine(line int, err error) error {
	if err == nil || line <= 0 || errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		return err
	}
	var pe *posError
	if errors.As(err, &pe) {
		return err
	}
	return &posError{line: line, err: err}
}

// budget is the one set of limits every statement, builtin, filter and
// method charges before it does work or allocates.
type budget struct {
	ctx      context.Context
	deadline time.Time
	timeout  time.Duration

	steps, maxSteps int64
	work            int64 // units since the last step conversion
	sinceCheck      int64 // work + steps since the last clock/context check

	alloc, maxAlloc int64 // bytes charged for values and output, cumulative
	maxStr          int64 // bytes in any one string, and in the output
}

// step charges one statement, loop iteration or expression output.
func (b *budget) step() error {
	b.steps++
	if b.steps > b.maxSteps {
		return limitf("more than %d steps (Options.MaxSteps; a loop bomb?)", b.maxSteps)
	}
	b.sinceCheck += checkEvery / checkEverySteps
	if b.sinceCheck >= checkEvery {
		return b.check()
	}
	return nil
}

// spend charges n units of work (bytes scanned or copied, items visited or
// compared) to the step budget, and checks the clock and context often
// enough that one long builtin cannot outrun them.
func (b *budget) spend(n int64) error {
	if n <= 0 {
		return nil
	}
	b.work += n
	if b.work >= workPerStep {
		b.steps += b.work / workPerStep
		b.work %= workPerStep
		if b.steps > b.maxSteps {
			return limitf("more than %d steps (Options.MaxSteps): builtins did too much work", b.maxSteps)
		}
	}
	b.sinceCheck += n
	if b.sinceCheck >= checkEvery {
		return b.check()
	}
	return nil
}

// check tests the context and the wall-clock limit.
func (b *budget) check() error {
	b.sinceCheck = 0
	if err := b.ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w (%w)", limitf("the caller's deadline passed while rendering"), err)
		}
		return fmt.Errorf("rendering stopped: %w", err)
	}
	if time.Now().After(b.deadline) {
		return limitf("rendering took longer than %v (Options.Timeout)", b.timeout)
	}
	return nil
}

// charge adds n bytes to the allocation budget.
func (b *budget) charge(n int64) error {
	if n < 0 || n > b.maxAlloc-b.alloc {
		return limitf("the template allocated more than %d bytes (Options.MaxAllocBytes)", b.maxAlloc)
	}
	b.alloc += n
	return nil
}

// newStr is called before building a string of n bytes: n must be within
// the string size limit, and is charged to the work and allocation budgets.
func (b *budget) newStr(n int64, what string) error {
	if n < 0 || n > b.maxStr {
		return limitf("%s would be %s, over %d bytes (Options.MaxOutputBytes)", what, sizeText(n), b.maxStr)
	}
	if err := b.charge(n); err != nil {
		return err
	}
	return b.spend(n)
}

// Bytes charged per list slot and per dict entry (the Go slice or map slot,
// and the boxed value it usually holds).
const (
	itemBytes  = 24
	entryBytes = 96
)

// newList is called before building a list of n items.
func (b *budget) newList(n int64, what string) error {
	if n < 0 || n > maxItems {
		return limitf("%s would have %s items, over the %d-item limit on lists", what, sizeText(n), maxItems)
	}
	if err := b.charge(n * itemBytes); err != nil {
		return err
	}
	return b.spend(n)
}

// newDict is called before building a dict of n entries.
func (b *budget) newDict(n int64, what string) error {
	if n < 0 || n > maxItems {
		return limitf("%s would have %s entries, over the %d-entry limit on dicts", what, sizeText(n), maxItems)
	}
	if err := b.charge(n * entryBytes); err != nil {
		return err
	}
	return b.spend(n)
}

// growDict is called before adding up to n entries to d.
func (b *budget) growDict(d *dict, n int64, what string) error {
	if total := int64(len(d.keys)) + n; total > maxItems {
		return limitf("%s: a dict would have %d entries, over the %d-entry limit on dicts", what, total, maxItems)
	}
	if err := b.charge(n * entryBytes); err != nil {
		return err
	}
	return b.spend(n)
}

func sizeText(n int64) string {
	if n < 0 || n == math.MaxInt64 {
		return "more than 2^63"
	}
	return fmt.Sprint(n)
}

// mulSize is a*b for sizes, saturating at math.MaxInt64 instead of
// overflowing (a and b are non-negative).
func mulSize(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// addSize is a+b for sizes, saturating at math.MaxInt64.
func addSize(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
