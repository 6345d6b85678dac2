package retention

// WithBlocks makes the ledgers of a retainer made with opts close their
// blocks at messages messages and bytes bytes (1 and 1: every message its
// own block, and the measure exact).
func WithBlocks(opts Options, messages, bytes int64) Options {
	opts.blocks = blockBounds{messages: messages, bytes: bytes}
	return opts
}
