package lua

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"
)

// Each script is run through one request type below, whose fields are its contract: the keys
// (in KEYS order), then the arguments (in ARGV order), and whose doc says what it replies. A
// script's file says what it does; the contract is written here only.

// A Request is the typed keys and arguments of one run of a script.
type Request interface {
	Call() Call
}

// A Cancellable request can be repeated as its own cancel: the same request number, asking
// the script to give back whatever the first run took, if it ran (see lib.lua's numbered).
type Cancellable interface {
	Request
	Cancel() Call
}

// An Acquire is an acquire request, sent with the holds its owner knows it has then.
type Acquire interface {
	WithHolds(holds int) Call
}

// Acquired is what the reply of every Acquire's script says.
type Acquired struct {
	Taken bool  // the lock was acquired or re-entered
	Token int64 // a fenced lock's token, when Taken
	Lost  bool  // the owner knows of holds, but Redis has none of its
	// Hint, when neither, is the ms until the state may change with no message: the holder's
	// lease (negative: unknown, or no expiry).
	Hint int64
	// Listener, when neither, says the waiting attempt made its client the listener of
	// Redisson's channel (a plain lock's).
	Listener bool
}

// ReadAcquired reads an acquire script's reply: nil when taken, a fenced lock's {-1, token}
// when taken, -3 when Lost, else the hint, in a one-element array for a listener.
func ReadAcquired(msg rueidis.RedisMessage) (Acquired, error) {
	if msg.IsNil() {
		return Acquired{Taken: true}, nil
	}
	arr, err := msg.ToArray()
	switch {
	case err == nil && len(arr) == 2:
		token, err := arr[1].AsInt64()
		return Acquired{Taken: err == nil, Token: token}, err
	case err == nil && len(arr) == 1:
		hint, err := arr[0].AsInt64()
		return Acquired{Hint: hint, Listener: err == nil}, err
	}
	hint, err := msg.AsInt64()
	return Acquired{Hint: hint, Lost: err == nil && hint == acquireLost}, err
}

// acquireLost is the reply of an acquire that found the owner's holds gone.
const acquireLost = -3

// A Call is a script with its keys and arguments, as sent.
type Call struct {
	Script     *Script
	Keys, Args []string
}

// Call is c itself, so that a built call is a Request too.
func (c Call) Call() Call { return c }

// Exec runs the call by SHA, and whole where Redis lacks the script (rueidis's Lua.Exec).
func (c Call) Exec(ctx context.Context, client rueidis.Client) rueidis.RedisResult {
	return c.Script.Exec(ctx, client, c.Keys, c.Args)
}

// Cmd builds the call as EVALSHA — or as EVAL, whole, when whole is set (Redis lacked the
// script: NOSCRIPT).
func (c Call) Cmd(b rueidis.Builder, whole bool) rueidis.Completed {
	return c.Script.Cmd(b, c.Keys, c.Args, whole)
}

// Numbered is what a request numbered on its owner's unlock latch carries (see lib.lua's
// numbered), which makes it safe to repeat.
type Numbered struct {
	Latch   string // key: the owner's unlock latch
	N       uint64 // the request's number on the latch, rising per owner
	LatchMs string // how long the latch's marks last (ms)
}

func (n Numbered) num() string { return strconv.FormatUint(n.N, 10) }

// Registration is what a waiting client registers with (see lib.lua's wait_here and
// sem_wait): its token, how long its registration lasts (ms), and whether it has other
// waiters on the object.
type Registration struct {
	Token  string
	Ms     string
	Others bool
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func itoa(n int) string { return strconv.Itoa(n) }

// LockAcquire takes or re-enters a plain or fenced lock, or registers a waiting attempt's
// client (lock_acquire.lua). Reply: nil when acquired or re-entered (a fenced lock: {-1,
// token}); -3 when the owner knows of holds but its field is gone; else the holder's PTTL
// (-1: no expiry), in a one-element array when a waiting attempt's client is the listener.
type LockAcquire struct {
	Lock              string
	Clients, Listener string // keys of a waiting attempt or a fenced lock: the waiting clients (zset), the listener
	TokenKey          string // a fenced lock's token counter; "" for a plain lock
	LeaseMs, Owner    string
	Holds             int           // the holds the owner knows it has (0: a first acquire)
	Wait              *Registration // a waiting attempt's registration; nil for none
	Publish           string        // the publish command (a waiting attempt)
}

// WithHolds is the request sent by an owner that knows of holds.
func (r LockAcquire) WithHolds(holds int) Call {
	r.Holds = holds
	return r.Call()
}

func (r LockAcquire) Call() Call {
	keys := []string{r.Lock}
	if r.Wait != nil || r.TokenKey != "" {
		keys = append(keys, r.Clients, r.Listener)
	}
	if r.TokenKey != "" {
		keys = append(keys, r.TokenKey)
	}
	args := []string{r.LeaseMs, r.Owner, itoa(r.Holds)}
	if w := r.Wait; w != nil {
		args = append(args, w.Token, w.Ms, flag(w.Others), r.Publish)
	}
	return Call{lockAcquire, keys, args}
}

// LockRelease drops one hold of a plain or fenced lock, and when it frees the lock wakes
// the next waiting client, or hands the lock to Heir (lock_release.lua). Reply: nil when the
// owner does not hold the lock; 0 when still held; 1 when freed; 2 when handed to Heir.
type LockRelease struct {
	Lock, Channel string
	Numbered      // the latch is the third key
	Clients       string
	Listener      string
	LeaseMs       string // a partial release keeps at least this lease
	Owner         string
	Publish       string
	Holds         int    // the holds the owner knows it has (this release drops one)
	Token         string // the client's token
	Left          bool   // the client has waiters left on the lock (besides the heir)
	RegMs         string // how long a registration lasts (ms)
	Heir          string // an owner to hand the lock to when the release frees it ("": none)
	HeirLeaseMs   string
}

func (r LockRelease) Call() Call {
	args := []string{r.LeaseMs, r.Owner, r.Publish, r.LatchMs, itoa(r.Holds), r.num(), r.Token, flag(r.Left), r.RegMs}
	if r.Heir != "" {
		args = append(args, r.Heir, r.HeirLeaseMs)
	}
	return Call{lockRelease, []string{r.Lock, r.Channel, r.Latch, r.Clients, r.Listener}, args}
}

// LockForceRelease deletes a plain or fenced lock whoever holds it, and wakes the next
// waiting client (lock_force_release.lua). Reply: 1 when a lock was deleted, else 0.
type LockForceRelease struct {
	Lock, Channel, Clients string
	Publish                string
}

func (r LockForceRelease) Call() Call {
	return Call{lockForceRelease, []string{r.Lock, r.Channel, r.Clients}, []string{r.Publish}}
}

// LockLeave drops a client's registration as a waiter of a plain lock when its last waiter
// gives up (lock_leave.lua). Reply: 0.
type LockLeave struct {
	Lock, Clients, Channel, Listener string
	Leaving
}

func (r LockLeave) Call() Call {
	return Call{lockLeave, []string{r.Lock, r.Clients, r.Channel, r.Listener}, r.args()}
}

// Leaving is what a client whose last waiter gives up sends: its token, the publish
// command, and how long a registration lasts (ms).
type Leaving struct {
	Token, Publish, RegMs string
}

func (l Leaving) args() []string { return []string{l.Token, l.Publish, l.RegMs} }

// LockRenew renews a batch of exclusive holds, of any lock but a read lock: Owners[i] in
// Locks[i] (lock_renew.lua). Reply: an array, 1 where the owner still held the lock (its TTL
// now at least the lease), 0 where not.
type LockRenew struct {
	Locks   []string
	LeaseMs string
	Owners  []string
}

func (r LockRenew) Call() Call {
	return Call{lockRenew, r.Locks, append([]string{r.LeaseMs}, r.Owners...)}
}

// FairAcquire takes or re-enters a fair lock, or keeps the caller's place in its queue
// (fair_acquire.lua). Reply: nil when acquired or re-entered; -3 when the owner knows of
// holds but its field is gone; else the ms until the lock may come to it with no message
// (-1: unknown).
type FairAcquire struct {
	FairKeys
	LeaseMs, Owner string
	Holds          int
	WaitMs, NowMs  string
	Waiting        bool // take a place in the queue when the lock cannot be taken
}

// FairKeys are the keys every fair lock script starts with. Waiters marks the queue's
// latchkey waiters, which tells the Java waiters among them apart.
type FairKeys struct {
	Lock, Queue, Timeouts, Waiters string
}

func (k FairKeys) keys(more ...string) []string {
	return append([]string{k.Lock, k.Queue, k.Timeouts, k.Waiters}, more...)
}

// WithHolds is the request sent by an owner that knows of holds.
func (r FairAcquire) WithHolds(holds int) Call {
	r.Holds = holds
	return r.Call()
}

func (r FairAcquire) Call() Call {
	return Call{fairAcquire, r.keys(), []string{r.LeaseMs, r.Owner, itoa(r.Holds), r.WaitMs, r.NowMs, flag(r.Waiting)}}
}

// FairRelease drops one hold of a fair lock, and when it frees the lock wakes the head
// waiter (fair_release.lua). Reply: nil when the owner does not hold the lock; 0 when
// still held; 1 when freed.
type FairRelease struct {
	FairKeys
	Channel  string
	Numbered // the latch is the sixth key
	LeaseMs  string
	Owner    string
	Publish  string
	Holds    int
	NowMs    string
}

func (r FairRelease) Call() Call {
	return Call{fairRelease, r.keys(r.Channel, r.Latch),
		[]string{r.LeaseMs, r.Owner, r.Publish, r.LatchMs, itoa(r.Holds), r.num(), r.NowMs}}
}

// FairForceRelease deletes a fair lock whoever holds it, and wakes the head waiter
// (fair_force_release.lua). Reply: 1 when a lock was deleted, else 0.
type FairForceRelease struct {
	FairKeys
	Channel        string
	Publish, NowMs string
}

func (r FairForceRelease) Call() Call {
	return Call{fairForceRelease, r.keys(r.Channel), []string{r.Publish, r.NowMs}}
}

// FairLeave takes a waiter that gives up out of a fair lock's queue (fair_leave.lua).
// Reply: 0.
type FairLeave struct {
	FairKeys
	Channel               string
	Owner, Publish, NowMs string
}

func (r FairLeave) Call() Call {
	return Call{fairLeave, r.keys(r.Channel), []string{r.Owner, r.Publish, r.NowMs}}
}

// ReadAcquire takes or re-enters a read lock of a read-write lock (rw_read_acquire.lua).
// Reply: nil when acquired or re-entered; -3 when the owner knows of read holds but its
// field is gone; else the ms until the lock may come free with no message (-1: unknown).
type ReadAcquire struct {
	Lock     string
	Timeouts string // the owner's timeout key prefix
	Writers  string // the waiting writers (zset)
	LeaseMs  string
	Owner    string
	Writer   string // the owner's writer field, whose write hold lets it read ("": none)
	Holds    int
	NowMs    string
}

// WithHolds is the request sent by an owner that knows of holds.
func (r ReadAcquire) WithHolds(holds int) Call {
	r.Holds = holds
	return r.Call()
}

func (r ReadAcquire) Call() Call {
	return Call{readAcquire, []string{r.Lock, r.Timeouts, r.Writers}, []string{r.LeaseMs, r.Owner, r.Writer, itoa(r.Holds), r.NowMs}}
}

// ReadRelease drops one read hold (rw_read_release.lua). Reply: nil when the owner holds no
// read lock; 0 when the lock is still held; 1 when freed.
type ReadRelease struct {
	Lock, Channel, Timeouts string
	Prefix                  string // the lock's key prefix ({N})
	Numbered                       // the latch is the fifth key
	Writers                 string
	Owner, Publish          string
	Holds                   int
	NowMs                   string
	LeaseMs                 string // the lease the owner's other holds keep
}

func (r ReadRelease) Call() Call {
	return Call{readRelease, []string{r.Lock, r.Channel, r.Timeouts, r.Prefix, r.Latch, r.Writers},
		[]string{"0", r.Owner, r.Publish, r.LatchMs, itoa(r.Holds), r.num(), r.NowMs, r.LeaseMs}}
}

// ReadRenew renews a batch of read holds: Owners[i]'s in Locks[i], whose timeout key prefix
// is Timeouts[i] (rw_read_renew.lua). Reply: an array, 1 where the owner still holds reads,
// 0 where not.
type ReadRenew struct {
	Locks, Timeouts []string
	LeaseMs         string
	Owners          []string
}

func (r ReadRenew) Call() Call {
	keys := make([]string, 0, 2*len(r.Locks))
	for i, k := range r.Locks {
		keys = append(keys, k, r.Timeouts[i])
	}
	return Call{readRenew, keys, append([]string{r.LeaseMs}, r.Owners...)}
}

// WriteAcquire takes or re-enters a write lock, or claims it as a waiting writer
// (rw_write_acquire.lua). Reply: nil when acquired or re-entered; -3 when the owner knows
// of write holds but its field is gone; else the holder's PTTL.
type WriteAcquire struct {
	Lock, Writers string
	LeaseMs       string
	Owner         string // the owner's writer field
	Holds         int
	NowMs         string
	ClaimMs       string // how long a waiting writer's claim lasts without a new attempt
	Waiting       bool
}

// WithHolds is the request sent by an owner that knows of holds.
func (r WriteAcquire) WithHolds(holds int) Call {
	r.Holds = holds
	return r.Call()
}

func (r WriteAcquire) Call() Call {
	return Call{writeAcquire, []string{r.Lock, r.Writers}, []string{r.LeaseMs, r.Owner, itoa(r.Holds), r.NowMs, r.ClaimMs, flag(r.Waiting)}}
}

// WriteRelease drops one write hold (rw_write_release.lua). Reply: nil when the owner does
// not hold the write lock; 0 when still held; 1 when released.
type WriteRelease struct {
	Lock, Channel string
	Numbered      // the latch is the third key
	Writers       string
	LeaseMs       string // a partial release keeps at least this lease
	Owner         string // the owner's writer field
	Publish       string
	Holds         int
}

func (r WriteRelease) Call() Call {
	return Call{writeRelease, []string{r.Lock, r.Channel, r.Latch, r.Writers},
		[]string{"1", r.LeaseMs, r.Owner, r.Publish, r.LatchMs, itoa(r.Holds), r.num()}}
}

// WriteLeave drops the claim of a waiting writer that gives up (rw_write_leave.lua). Reply:
// 1 when there was a claim, else 0.
type WriteLeave struct {
	Writers, Channel string
	Owner, Publish   string
}

func (r WriteLeave) Call() Call {
	return Call{writeLeave, []string{r.Writers, r.Channel}, []string{r.Owner, r.Publish}}
}

// SemKeys are the keys every semaphore script that changes permits starts with.
type SemKeys struct {
	Semaphore string
	Channel   string
	Clients   string // the waiting clients (zset)
	Wants     string // what their first waiters want (hash)
}

func (k SemKeys) keys(n Numbered, more ...string) []string {
	return append([]string{k.Semaphore, n.Latch, k.Channel, k.Clients, k.Wants}, more...)
}

// SemAcquire takes permits of a semaphore (sem_acquire.lua). Reply: the permits left (-1 from
// a repeat: not known); when fewer were available, {available} ({available, 1} to a
// waiting attempt whose client is the listener); nil from a repeat of a request that took
// nothing. As a cancel it gives back what the request took and replies 1 if so, else 0.
type SemAcquire struct {
	SemKeys
	Numbered // the latch is the second key
	Listener string
	Permits  int
	Publish  string
	Wait     *Registration // a waiting attempt's registration; nil for none
	cancel   bool
}

func (r SemAcquire) Call() Call {
	args := []string{itoa(r.Permits), r.num(), r.LatchMs, flag(r.cancel), r.Publish}
	if w := r.Wait; w != nil {
		args = append(args, w.Token, w.Ms, flag(w.Others))
	}
	return Call{semAcquire, r.keys(r.Numbered, r.Listener), args}
}

// Cancel is the request as its own cancel.
func (r SemAcquire) Cancel() Call {
	r.cancel = true
	return r.Call()
}

// SemRelease adds permits to a semaphore, or takes them away (sem_release.lua). Reply: 1.
type SemRelease struct {
	SemKeys
	Numbered
	Permits int // negative: taken away
	Publish string
}

func (r SemRelease) Call() Call {
	return Call{semRelease, r.keys(r.Numbered), []string{itoa(r.Permits), r.num(), r.LatchMs, r.Publish}}
}

// SemSet sets or drains a semaphore's permits (sem_set.lua). Reply: try: 1 when it set them,
// nil when the semaphore existed; set: 1; drain: the permits there were (-1 from a repeat:
// not known).
type SemSet struct {
	SemKeys
	Numbered
	Mode    string // "try", "set" or "drain"
	Permits int
	Publish string
}

func (r SemSet) Call() Call {
	return Call{semSet, r.keys(r.Numbered), []string{r.Mode, itoa(r.Permits), r.num(), r.LatchMs, r.Publish}}
}

// SemLeave drops a client's registration as a waiter of a semaphore when its last waiter
// gives up (sem_leave.lua). Reply: 0.
type SemLeave struct {
	Semaphore, Clients, Wants, Listener string
	Leaving
}

func (r SemLeave) Call() Call {
	return Call{semLeave, []string{r.Semaphore, r.Clients, r.Wants, r.Listener}, r.args()}
}

// LatchRequest is a countdown latch's numbered request: Set (Count >= 1) sets its count if
// it does not exist (latch_set.lua; reply 1 when set, nil when it existed), CountDown counts
// it down by one (latch_count_down.lua; reply 1), Delete deletes it (latch_delete.lua; reply
// 1 when deleted, nil when there was none).
type LatchRequest struct {
	CountDownLatch string
	Numbered       // the latch is the second key
	Publish        string
	Channel        string // an argument, not a key: with its own hash tag it is in another slot
}

// Set is the request that sets the count.
func (r LatchRequest) Set(count int) Call {
	return Call{latchSet, r.keys(), append([]string{itoa(count)}, r.args()...)}
}

// CountDown is the request that counts down by one.
func (r LatchRequest) CountDown() Call { return Call{latchCountDown, r.keys(), r.args()} }

// Delete is the request that deletes the latch.
func (r LatchRequest) Delete() Call { return Call{latchDelete, r.keys(), r.args()} }

func (r LatchRequest) keys() []string { return []string{r.CountDownLatch, r.Latch} }

func (r LatchRequest) args() []string { return []string{r.num(), r.LatchMs, r.Publish, r.Channel} }

// PermitKeys are the keys every permit-expirable semaphore script that changes permits
// has.
type PermitKeys struct {
	Semaphore string
	Acquired  string // the acquired permits (zset)
	Channel   string
}

func (k PermitKeys) keys(n Numbered) []string {
	return []string{k.Semaphore, k.Acquired, n.Latch, k.Channel}
}

// PermitAcquire takes permits of a permit-expirable semaphore (perm_acquire.lua). Reply: the
// permits left (-1 from a repeat: not known); when too few were available, {ms until the
// nearest expiry}, or nil when none expires; {'total', permits in all} when there are fewer
// in all than asked for; nil from a repeat of a request that took nothing. As a cancel it
// gives back what the request took and replies 1 if so, else 0.
type PermitAcquire struct {
	PermitKeys
	Numbered        // the latch is the third key
	ExpiryMs string // the permits' expiry (epoch ms, or no_expiry)
	NowMs    string
	Publish  string
	IDs      []string // the permits' IDs (hex)
	cancel   bool
}

func (r PermitAcquire) Call() Call {
	args := append([]string{r.ExpiryMs, r.NowMs, r.num(), r.LatchMs, flag(r.cancel), r.Publish}, r.IDs...)
	return Call{permitAcquire, r.keys(r.Numbered), args}
}

// Cancel is the request as its own cancel.
func (r PermitAcquire) Cancel() Call {
	r.cancel = true
	return r.Call()
}

// PermitRelease gives back acquired permits (perm_release.lua). Reply: how many of them were
// acquired and unexpired (-1 from a repeat: not known).
type PermitRelease struct {
	PermitKeys
	Numbered
	NowMs   string
	Publish string
	IDs     []string
}

func (r PermitRelease) Call() Call {
	return Call{permitRelease, r.keys(r.Numbered), append([]string{r.NowMs, r.num(), r.LatchMs, r.Publish}, r.IDs...)}
}

// PermitSet sets or adds a permit-expirable semaphore's permits (perm_set.lua). Reply: 1;
// nil from "try" when the semaphore existed.
type PermitSet struct {
	PermitKeys
	Numbered
	Mode    string // "try", "set" or "add"
	Permits int
	NowMs   string
	Publish string
}

func (r PermitSet) Call() Call {
	return Call{permitSet, r.keys(r.Numbered), []string{r.Mode, itoa(r.Permits), r.NowMs, r.num(), r.LatchMs, r.Publish}}
}

// PermitState reads a permit-expirable semaphore, or extends a permit's lease
// (perm_state.lua). Reply, by Mode: "available", "acquired": those permits; "permits": both;
// "lease": the ms the permit ID has left (-1: never expires, nil: not acquired); "update": 1
// when the permit was acquired (its expiry now at least ExpiryMs), else 0.
type PermitState struct {
	Semaphore, Acquired, Channel string
	Mode                         string
	NowMs                        string
	Publish                      string
	ID                           string // "lease", "update"
	ExpiryMs                     string // "update": epoch ms, or no_expiry
}

func (r PermitState) Call() Call {
	args := []string{r.Mode, r.NowMs, r.Publish}
	if r.ID != "" {
		args = append(args, r.ID)
	}
	if r.ExpiryMs != "" {
		args = append(args, r.ExpiryMs)
	}
	return Call{permitState, []string{r.Semaphore, r.Acquired, r.Channel}, args}
}

// PermitRenew renews a batch of permit acquisitions: Permits[i] (their IDs, concatenated) in
// Acquired[i] (perm_renew.lua). Reply: an array, 1 where every permit of the acquisition was
// still acquired and unexpired (each now expires at least the lease from now), 0 otherwise.
type PermitRenew struct {
	Acquired []string
	LeaseMs  string
	NowMs    string
	Permits  []string
}

func (r PermitRenew) Call() Call {
	return Call{permitRenew, r.Acquired, append([]string{r.LeaseMs, r.NowMs}, r.Permits...)}
}

// The scripts, each run only through its request type above.
var (
	lockAcquire      = newScript("lock_acquire.lua")
	lockRelease      = newScript("lock_release.lua")
	lockForceRelease = newScript("lock_force_release.lua")
	lockLeave        = newScript("lock_leave.lua")
	lockRenew        = newScript("lock_renew.lua")
	fairAcquire      = newScript("fair_acquire.lua")
	fairRelease      = newScript("fair_release.lua")
	fairForceRelease = newScript("fair_force_release.lua")
	fairLeave        = newScript("fair_leave.lua")
	readAcquire      = newScript("rw_read_acquire.lua")
	readRelease      = newScript("rw_read_release.lua")
	readRenew        = newScript("rw_read_renew.lua")
	writeAcquire     = newScript("rw_write_acquire.lua")
	writeRelease     = newScript("rw_write_release.lua")
	writeLeave       = newScript("rw_write_leave.lua")
	semAcquire       = newScript("sem_acquire.lua")
	semRelease       = newScript("sem_release.lua")
	semSet           = newScript("sem_set.lua")
	semLeave         = newScript("sem_leave.lua")
	latchSet         = newScript("latch_set.lua")
	latchCountDown   = newScript("latch_count_down.lua")
	latchDelete      = newScript("latch_delete.lua")
	permitAcquire    = newScript("perm_acquire.lua")
	permitRelease    = newScript("perm_release.lua")
	permitSet        = newScript("perm_set.lua")
	permitState      = newScript("perm_state.lua")
	permitRenew      = newScript("perm_renew.lua")
)
