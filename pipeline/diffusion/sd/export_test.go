package sd

// Unscale exposes the per-class latent unscaling done before decoding.
func (p *Pipeline) Unscale(z []float32, channels, hw int) { p.unscale(z, channels, hw) }

// StartSchedule exposes the scheduler set-up Generate does before the loop.
var StartSchedule = (*Pipeline).startSchedule
