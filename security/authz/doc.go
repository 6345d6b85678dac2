// Package authz decides who may append to, read and administer which
// channels of a streamwal node: it authenticates a request into a
// principal (from its verified client certificate or a bearer token),
// decides whether the principal's roles grant the action on the channel,
// and logs and counts every refusal. It knows nothing of the node API; the
// node package maps its methods to actions (see "Enforcement" below).
//
// # Policy file
//
// A policy is a YAML file (walnode -authz <file>) with two sections:
//
//	# roles: name -> grants; a grant gives actions on channels.
//	roles:
//	  producer:
//	    - actions: [append]
//	      channels: ["orders-*", "pch-0"]
//	  reader:
//	    - actions: [read]
//	      channels: ["*"]
//	  operator:
//	    - actions: [read, admin]
//	      channels: ["*"]
//
//	# principals: name -> roles, and the hashes of its bearer tokens.
//	principals:
//	  alice:              # a client certificate whose subject CN is "alice"
//	    roles: [producer, reader]
//	  billing:            # a service without a certificate: a token
//	    roles: [reader]
//	    tokens:
//	      - sha256:4c9d7a3f...   (64 hex digits, from walctl token create)
//
// Unknown keys, duplicate keys and values of the wrong type are refused.
// Every problem is reported with the file, the line and the key path, for
// example
//
//	authz: policy.yaml:14: principals.billing.tokens[0]: a token in plain text; the file holds only its hash (walctl token create prints the line to put here)
//
// and a node given a policy it cannot load does not start: nothing fails
// open. walnode reloads the file on SIGHUP (Guard.SetPolicy): a token is
// revoked, or a principal added, from the next request on, without a
// restart; a file that does not load then leaves the previous policy in
// force and the log says why.
//
// # Actions
//
//	append  Append and AppendBatch on the channel.
//	read    Read (and tail) of the channel.
//	admin   administering it: the node's Status and /admin/channels (with
//	        read, see below); cluster actions (move, drain, undrain,
//	        rebalance, delete) are guarded by etcd's own RBAC, see
//	        "Administrative actions".
//	commit  Commit of a consumer's checkpoint on the channel (or one of
//	        its vchannels): the channel's owner then deletes what every
//	        consumer is past. A consumer that reads and commits needs read
//	        and commit; consumer names are not bound to principals, so
//	        grant commit only to the consumers trusted to say how far they
//	        processed.
//
// No action implies another: an operator who also reads is given both.
//
// # Channel patterns
//
// A grant's channels are patterns:
//
//	pch-0       that channel (or vchannel) only, literally
//	orders-*    every name starting with "orders-" (a prefix; "*" is only
//	            allowed last)
//	*           every channel: the empty prefix
//
// The part before "*" follows the rules of channel names ([A-Za-z0-9._-],
// at most 255 bytes), so a pattern can never be confused with a name.
//
// # Vchannels
//
// A request names a pchannel, and may name vchannels inside it (the
// vchannel of each appended message, the vchannel filter of a read). A
// grant on a pchannel covers every vchannel in it: reading a pchannel
// without a filter delivers all of them. A grant on a vchannel name covers
// that vchannel's messages only. So a request is allowed when the
// principal holds the action on the pchannel it names, or when it is
// confined to vchannels (every message it appends carries a vchannel, or
// its read filters on vchannels) and the principal holds the action on
// each of them. The same rule holds for every action; one name is never
// authorized by another's grant in any other way.
//
// A vchannel lives in one pchannel: the one the channel pool allocated it
// to. With GuardOptions.Placed (a node with the pool, as walnode runs), a
// request allowed by vchannel grants alone is refused (PermissionDenied,
// reason vchannel_elsewhere) unless the pool allocated every vchannel it
// names to the pchannel it names: a producer granted "orders-*" appends
// messages of orders-x into orders-x's pchannel only, never into another
// pchannel whose readers would see them. A grant on the pchannel itself
// still covers whatever vchannel its messages carry.
//
// # Principals
//
// A principal is a name. A request is authenticated
//
//   - by a bearer token (header "Authorization: Bearer <token>") when it
//     carries one: the token's SHA-256 is compared, in constant time, with
//     the hashes in the policy; the principal is the one the matching hash
//     is listed under. A token that matches none is refused
//     (Unauthenticated) even if the connection also presents a valid
//     certificate: a request never falls back to a weaker identity.
//   - otherwise by its client certificate, verified by the server's TLS
//     configuration against its client CA (http.Request.TLS.VerifiedChains),
//     as certs.Identify reads it: a client certificate (URI SAN
//     streamwal://client/<name>, or none) is the principal of its subject
//     common name (CN); a node's (URI SAN streamwal://node/<name> with
//     server use) is the principal "streamwal://node/<name>", a name no
//     client certificate can take, so that a client named like a node
//     never holds what the node is granted (PrincipalName). A certificate
//     without a CN, or whose marks contradict each other, authenticates
//     no one.
//   - otherwise it is unauthenticated, and refused.
//
// A principal not in the policy (a certificate of the trusted CA for a name
// the policy does not list) is authenticated but holds nothing: every
// request it makes is refused with PermissionDenied.
//
// # Tokens
//
// A token is 32 random bytes from crypto/rand in base64url with the prefix
// "swt_" (NewToken; walctl token create). The policy holds only
// "sha256:" and the 64 lower-case hex digits of the SHA-256 of the token's
// text (HashToken). A value in the tokens list that is not such a hash is
// refused at load, and one that looks like a token is named as a token in
// plain text. A hash listed under two principals is refused. Tokens appear
// in no log line, error or metric: a refused token is logged as
// "bad_credentials" with no principal.
//
// A SHA-256 without salt or stretching is right here because tokens are
// random 256-bit values, not passwords a person chose: no dictionary
// reaches them.
//
// # Enforcement
//
// Once a node has a policy, every request is denied unless the policy
// grants it. The node maps its API to actions:
//
//	Append, AppendBatch           append on the channel (vchannel rule above)
//	Read                          read on the channel (vchannel rule above)
//	Commit                        commit on the channel (vchannel rule above,
//	                              on the commit's vchannel)
//	Checkpoints                   read or admin on the channel
//	Status, GET /admin/channels   read or admin on every channel ("*"): they
//	                              describe every channel of the node
//	GET /metrics                  read or admin on every channel ("*")
//	GET /healthz                  open: says "ok" or why not, nothing more
//	cluster.LivenessPath          the coordinator's failure detection holds
//	                              it; it carries the node's ID only, takes
//	                              no input and changes nothing. Where the
//	                              node verifies client certificates, only a
//	                              node's certificate may hold it (NodeName,
//	                              by certs.Identify); otherwise it is open,
//	                              bounded like every unauthenticated
//	                              request (package node)
//
// A request without credentials, or with a token that matches none, is
// Unauthenticated (HTTP 401 outside the RPC API); an authenticated request
// the policy does not grant is PermissionDenied (HTTP 403). Either way the
// request is refused before it reaches the WAL.
//
// # Audit
//
// Every refused request is logged, at Warn, with the principal ("" if
// none), the action, the channel, the reason and the peer's address, and
// counted in streamwal_authz_refused_total{action, reason}, where reason is
// one of no_credentials, bad_credentials, no_grant, vchannel_elsewhere. The
// node rate-limits these lines per peer and reason (the count is exact;
// the log says how many lines it left out). Allowed requests are
// neither logged nor counted here (the node counts its requests).
//
// # Administrative actions
//
// walctl's move, drain, undrain and rebalance write requests into etcd,
// under the cluster's root (package cluster), and the coordinator carries
// them out. They are guarded by etcd's own authentication and RBAC, with
// roles on the cluster's key ranges (EtcdRoles; walctl etcd-roles creates
// them; they are named alike for every root):
//
//	streamwal-node    readwrite on <root> and on <root without its slash>-meta/
//	                  (the channel pool): nodes and coordinators, which
//	                  register, assign channels and bump terms
//	streamwal-admin   read on <root>, readwrite on <root>requests/move/,
//	                  <root>requests/drain/, <root>requests/migrate/,
//	                  <root without its slash>-meta/chain/ and
//	                  <root without its slash>-meta/checkpoints/: walctl move,
//	                  drain, undrain, rebalance, migrate (and its -cancel,
//	                  which cancels a pending migration in the chain),
//	                  checkpoints -drop (a consumer that no longer holds
//	                  the log back)
//	streamwal-reader  read on <root> and on <root without its slash>-meta/chain/
//	                  and -meta/checkpoints/: walctl nodes, channels,
//	                  explain, checkpoints; the client's owner lookups
//	                  (every client needs it)
//
// An etcd user bound to streamwal-reader can look but not move, drain or
// rebalance; only streamwal-admin (or root) can write a request, and only
// streamwal-node (or root) can write an assignment.
//
// A node with a policy never runs beside an etcd without authentication.
// SyncEtcdAuth turns it on with the users the policy implies (EtcdUsers):
// root, EtcdNodeUser (streamwal-node, the nodes' user) and one user per
// principal, streamwal-admin for a principal that holds admin on every
// channel and streamwal-reader for every other (a client looks up
// channel owners in etcd). Root is created before authentication is turned
// on; users of streamwal's roles the policy no longer names are deleted.
// walnode does it to its embedded member at every start and policy reload,
// with the passwords in <-data>/etcd-auth/<user>.password; walctl etcd-auth
// does it to an etcd of your own. A node with a policy on an etcd whose
// authentication is off refuses to start unless told (-etcd-guarded-elsewhere)
// that etcd is guarded another way.
//
// Users are bound by name and password, never by a certificate's name:
// the embedded member does not map client certificates to users (etcd's
// --client-cert-auth would make a client certificate named root etcd's
// root, and one named like a node the node's user). Its TLS still admits
// only holders of a certificate of the cluster's CA (unless
// -tls-client-cert-optional). "root" and names starting with "streamwal-"
// are reserved: no principal may take them.
package authz
