package node

import "time"

// SetWaitingForOpen sets a hook called when a request begins to wait for
// its channel's open; call it before Start.
func (n *Node) SetWaitingForOpen(f func(channel string)) { n.waitingForOpen = f }

// SetLivenessAfter replaces the timer that ends a liveness stream without
// heartbeats (Config.LivenessIdle); call it before Start.
func (n *Node) SetLivenessAfter(f func(d time.Duration) <-chan time.Time) { n.after = f }
