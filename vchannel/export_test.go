package vchannel

// WithDetachHook returns o with f called by the router right after each
// detachment, so that tests wait on it instead of polling.
func WithDetachHook(o ReplayOptions, f func(vchannel string)) ReplayOptions {
	o.onDetach = f
	return o
}

// RouterWaiting reports whether r's router waits for room in a full
// stream.
func RouterWaiting(r *Replayer) bool { return r.waiting.Load() }
