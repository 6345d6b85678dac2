package local

import "github.com/streamwal/streamwal/walimpls"

// NewBuilder returns the local backend's walimpls.Builder: its
// BuildParams Config decodes into a Config, and the Opener it builds is
// the Store New opens (closing it closes the store).
func NewBuilder() walimpls.Builder { return walimpls.NewBuilder(Name, New) }
