package sync

const (
	lockChannelPrefix = "redisson_lock__channel"
	unlockLatchPrefix = "redisson_unlock_latch"

	semaphoreChannelPrefix = "redisson_sc"
)
