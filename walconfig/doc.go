// Package walconfig turns configuration into backends: it reads the YAML
// configuration, and builds the Opener of each backend it names from the
// compiled-in backends, registered by explicit calls on a registry value.
//
// # One backend
//
// A file names one backend, and its section holds the backend's settings:
//
//	backend: local        # local (default) | memory | kafka | pulsar | s3
//	local:                # the section of the chosen backend is decoded
//	  dir: ./streamwal-data
//	  sync: always
//	kafka:
//	  seedBrokers: [127.0.0.1:9092]
//
//	meta:                 # where the control data lives (see MetaConfig)
//	  store: bolt
//	pool:                 # the channel pool (see PoolConfig)
//	  size: 16
//	retention:            # a node's caps on what no consumer committed on
//	  maxAge: 168h        # (see RetentionConfig; off by default)
//
// An explicit choice wins; otherwise the embedded "local" backend. Sections
// of backends that are not chosen are checked but not used. Such a file is
// one entry (see below), named after its backend: Build builds it, and
// BuildAll builds it alone.
//
// # Several backends
//
// A channel that moves between backends is a chain of segments, each on
// one backend (package chain). A node that reads or writes such channels
// needs every backend the chains name, so a file may name several, side by
// side, as the entries of backends:
//
//	backends:
//	  local:                # entry name; when it is a registered backend, it is the kind
//	    dir: ./streamwal-data
//	  kafka:
//	    seedBrokers: [127.0.0.1:9092]
//	  kafka-east:           # a second entry of one kind names it in kind:
//	    kind: kafka
//	    seedBrokers: [10.0.0.1:9092]
//	default: local          # where channels without a chain begin
//
// An entry's name is what a chain records (chain.Backend.Name): 1 to 128
// bytes of [a-z0-9-], beginning with a letter or a digit. Its kind is the
// registered backend it is built with (chain.Backend.Kind): the value of
// its kind key, or else its name. Its keys are those of its kind's
// settings (local.Config, kafka.Config, ...) and kind, checked as strictly
// as the rest of the file: by Parse for a compiled-in kind, when built for
// a kind of the caller's Registry. An entry without settings ("memory:")
// takes its kind's defaults.
//
// default names the default entry: where channels without a chain begin,
// what Config.Default and Config.Chosen return, what Build builds and the
// backend OpenPool records. It may be left out when backends has one entry.
// The top-level backend key may stand beside backends only when it names
// the default entry; the top-level sections of backends (local:, kafka:,
// ...) may not: with backends, a backend's settings are in its entry.
// With bolt as the meta store, meta.db is by default in the dir of the
// default entry when it is of kind local, else of the entry named local.
//
// # What a chain records of an entry
//
// Backends.Describe gives what a chain records of an entry: its Name, Kind
// and Params, the settings that locate its data, with their defaults
// applied, as a compact JSON object. Params never hold a secret: the entry
// supplies credentials and TLS when the segment is opened. An s3 entry is
// checked by s3.Config.Validate as its Params are made, before anything is
// built (a missing bucket, a prefix without its final slash, an endpoint
// that is not an http or https URL are refused at their line), and an
// endpoint that holds user information is refused without being repeated:
// an s3 entry's credentials come from its credentialsFile (and profile) or
// the AWS chain.
//
//	local    {"dir":"/abs/streamwal-data"}     the directory, absolute and cleaned (symlinks are not resolved)
//	memory   none                              a memory entry is one of the Registry's memory cluster
//	kafka    {"seedBrokers":["a:9092","b:9092"],"topicPrefix":"streamwal-"}
//	                                           seed brokers sorted, without repeats (their order does not move the data)
//	pulsar   {"serviceUrl":"pulsar://h:6650","tenant":"public","namespace":"default","topicPrefix":"streamwal-"}
//	                                           the service URL without user information
//	s3       {"endpoint":"http://h:9000","bucket":"wal","prefix":"streamwal/","region":"us-east-1","pathStyle":true}
//	                                           the endpoint without a trailing slash ("" for AWS S3 of the region),
//	                                           prefix "" for one configured as "/" (no prefix)
//
// A kind walconfig does not know (a backend of the caller's Registry)
// has no Params. Two entries of one kind with the same Params (two local
// entries on one directory) are refused: each place has one entry.
//
// A node reopens a segment from what its chain recorded, never from a
// configuration read later: Backends.Opener, which implements
// chainread.Openers, serves the entry of the recorded Name only when its
// Kind is the recorded one and its Params equal the recorded Params as
// JSON values (empty Params being the empty object); otherwise its error
// matches ErrBackendMismatch and says what each holds. A Name that is no
// entry is an error matching ErrUnknownEntry and chainread.ErrNoOpener.
//
// # Errors
//
// Parse and Load check the whole file, strictly: an unknown key at the top
// level or at any level of any section or entry (also a backend's that is
// not chosen), a key given twice, and a value of the wrong type are errors,
// not silent defaults. Each error names the file (for Load), the line of
// the offending key or value, and its key path, and suggests the known key
// a near miss was meant to be:
//
//	selector: node.yaml:1: bakend: unknown key (did you mean "backend"?)
//	selector: node.yaml:4: local.segmentByte: unknown key (did you mean "segmentBytes"?)
//	selector: node.yaml:4: local.segmentBytes: want an integer, got "big"
//	selector: node.yaml:9: backends.kafka-east.seedBroker: unknown key (did you mean "seedBrokers"?)
//	selector: node.yaml:12: default: "lcoal" is no entry of backends (did you mean "local"?; entries: kafka, kafka-east, local)
//
// Errors begin with "selector:", the name this package was first
// published under: scripts that match the messages keep working.
//
// Every such error is a *ConfigError and matches walimpls.ErrInvalidConfig;
// a file with several problems reports them all, one per line, in the
// order of the file. Values a backend, the meta store or the pool refuses
// when it is built (a sync policy it does not know, a size out of range)
// are reported the same way, at the line of the key the refusal names. An
// unknown backend name (or kind) is an ErrUnknownBackend error listing the
// registered ones.
//
// The sections a file may hold are those of the backends compiled in (see
// Registry), besides backend, backends, default, meta and pool.
package walconfig
