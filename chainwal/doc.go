// Package chainwal opens a channel as a chain of segments (package chain):
// the WAL a node writes and reads is the writer of the chain's last
// segment, with readers across every kept segment, and the migration
// steps a chain needs on the way are driven by the open itself. Its Opener
// is a walmanager.WALOpener: a node that hands it to its manager gets
// channels that can move between backends without any other change.
//
// # Opening the chain at a term
//
// Opener.Open(ctx, Channel{Name, Term: T}):
//
//  1. Reads the channel's chain. A channel without one gets a chain of one
//     segment on Config.Default, whose backend channel is the channel's
//     own name and whose first term is 0: a channel that existed before
//     chains is adopted with its data, and a new one starts there.
//  2. Finishes a migration that is pending at a term at or below T: fences
//     the last segment on its own backend at the migration's term and reads
//     where it ends (adaptor.FenceEnd, floored by the previous seal's
//     timetick), then records the seal and the new segment
//     (chain.Store.Seal, one conditional write). A pending migration at a
//     term above T is left for its own open.
//  3. Refuses T when the last segment began at a higher term
//     (walimpls.ErrFenced: this open is stale).
//  4. Opens the last segment's backend channel at T (adaptor.Open), its
//     timeticks floored by the last seal's, and returns a WAL whose
//     appends go there and whose reads cross every kept segment
//     (chainread).
//
// Every step is one a crash may interrupt, and each is finished by the
// next open (see chain's package documentation, "What a crash leaves"):
// the intent stays in the chain until a seal or a cancel removes it, a
// fence without its seal is fenced again at the same term (harmless), and
// a seal without the new segment's open is an ordinary first open.
//
// # Migrating an embedded node's channel
//
// A migration is a term bump whose new owner opens on another backend. On
// a node without a coordinator the walmanager is the term authority:
// Migrate takes the channel's next term from it, records the intent
// (BeginMigration) and asks the manager to open the channel at that term,
// which closes the old WAL and runs the steps above. In a cluster the
// coordinator records the intent at the term it assigns, and the node it
// assigns opens the chain through this package the same way.
//
// # IDs and positions
//
// The WAL's IDs are chain IDs (chainread.IDOf): an append's ID names its
// segment, and compares with the IDs its scanners deliver. Their string
// form is a chain position (chain.ParsePosition): a bare backend ID is
// segment 0, so IDs and checkpoints written before a channel had a chain
// stay valid. ParseID and ParseCheckpoint read both; a position in a
// pruned segment reads, and reading from it is walimpls.ErrPositionGone.
//
// # Truncation and pruning
//
// Truncate(upTo) prunes first: every segment wholly before upTo's has its
// data deleted on its backend (deleting what is gone is not an error) and
// is then dropped from the chain (chain.Store.DropFront). Then, when upTo
// is in the last segment, that segment is truncated on its backend; a
// sealed segment is kept whole until a later truncation passes it. So the
// pool's pruner (package pool), which truncates each pchannel's WAL at
// the earliest checkpoint of its vchannels, prunes segments as it goes.
// Delete (walmanager.ChannelDeleter) deletes every kept segment's data,
// then the chain.
package chainwal
