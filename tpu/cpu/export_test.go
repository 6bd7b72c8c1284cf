package cpu

// Wide16Rewrites is wide16Rewrites' count, for the package's external
// tests.
func Wide16Rewrites() int64 { return wide16Rewrites.Load() }
