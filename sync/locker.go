package sync

import "context"

// A Locker is one lock of a MultiLock: a *Lock, *FairLock, *FencedLock, an *RWLock (its
// write lock) or an RWLock's Reader (a type that embeds one is a Locker too). Its holds are
// the handle's, as if it were used alone.
type Locker interface {
	TryLock(ctx context.Context, opts ...TryLockOption) (bool, error)
	Unlock(ctx context.Context) error
	// Valid reports whether the handle's hold is live now (see Lock.Valid).
	Valid() bool
	// Name is the lock's name.
	Name() string
	// where is the lock's name on its handle's Client: a MultiLock refuses two lockers of
	// one name on one Client (the second could only wait for the first).
	where() string
}

func (l *exclusive) where() string { return l.o.where() }
func (l *RWLock) where() string    { return l.write.where() }

// where is the owner's name on its Client ("" for a zero value, whose calls report it).
func (o *owner) where() string {
	if o.c == nil {
		return ""
	}
	return o.c.id + " " + o.name
}
