// Package fence implements the term-scoped fence keys that decide which
// allocation of a shard may acknowledge writes (the fencing protocol,
// sections 3, 4 and 6).
//
// Each term T owns one key, fence/fence__<inv T> (layout.FenceKey), written
// first with create-if-absent (Claim) and then only with compare-and-swap
// (Chain). A new term fences its predecessors by deleting their keys, so an
// incumbent's next CAS fails; a writer never touches a key above its own
// term, which is what makes a higher-term claim win deterministically
// against a busy incumbent. Chain.WaitOutLease is the successor's one lease
// wait, counted from the sweep.
//
// The protocol decisions are pure functions over what was read (Listing,
// SettleCreate, SettleWrite, CheckSweep, CheckOwn, in decide.go); Claim and
// Chain only do the I/O around them, through a blobstore.Container and an
// injectable steady Clock, so an interleaving checker can drive the same
// code against a controlled store. The claim's create is the shared
// create-if-absent-then-settle step (internal/settle), judged by
// SettleCreate; a CAS is classified by the same step's classifier.
//
// Clock, FakeClock, Backoff, Retry and ValidateID are the public names of
// the module's internal steady clock, retry and identifier packages.
package fence
