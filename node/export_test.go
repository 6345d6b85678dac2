package node

// SetWaitingForOpen sets a hook called when a request begins to wait for
// its channel's open; call it before Start.
func (n *Node) SetWaitingForOpen(f func(channel string)) { n.waitingForOpen = f }
