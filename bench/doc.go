// Package bench compares streamwal's local backend with other Go write-ahead
// logs on the same disk in the same run: pebble's record.LogWriter (group
// commit), etcd's WAL, tidwall/wal, and raw write+fdatasync. It is a module
// of its own so that streamwal does not depend on the libraries it is
// compared with. See README.md for how to run it and read the ratios.
package bench
