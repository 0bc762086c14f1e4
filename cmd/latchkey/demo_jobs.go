package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

const jobsKey = "demo:jobs"

func defaultJobsConfig() demoConfig {
	cfg := defaultDemoConfig()
	cfg.instances = 3
	return cfg
}

// jobsFlags are the jobs demo's flags, bound to cfg.
func jobsFlags(cfg *demoConfig) []demoFlag {
	return []demoFlag{
		{name: "instances", value: &cfg.instances, least: 2, usage: "worker instances, each with its own Redis connection and dsync.Client; the coordinator has one more",
			why: "the replacement runs on another instance than the killed worker"},
		{name: "workers", value: &cfg.workers, least: 1, usage: "jobs, one worker each, spread over the instances; the middle one is killed and replaced"},
	}
}

// runJobsDemo runs the jobs demo: a coordinator awaiting a CountDownLatch that its workers
// count down, one of them killed before it could and replaced.
func runJobsDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	return runSections(ctx, w, cfg, func(d *demo) []section {
		return []section{
			{"A coordinator waiting for its jobs on a CountDownLatch", d.jobs},
		}
	})
}

// instanceName names the i-th worker instance: A, B, C...
func instanceName(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return "#" + strconv.Itoa(i+1)
}

// jobDone is what a worker reports when it stops: when it counted down and the count it
// read just after, or why it did not. CountDown does not return the count it left, so that
// read may already include other workers' count-downs.
type jobDone struct {
	worker int
	at     time.Time
	count  int
	err    error
}

// released is the coordinator's Await returning: when, and how many count-downs had begun.
type released struct {
	at          time.Time
	countedDown int64
	err         error
}

func (d *demo) jobs(ctx context.Context) error {
	n, workers := d.cfg.instances, d.cfg.workers
	insts, closeAll, err := d.openInstances(n + 1)
	if err != nil {
		return err
	}
	defer closeAll()
	coord, pool := insts[0], insts[1:]
	instOf := func(worker int) int { return (worker - 1) % n }
	victim := (workers + 1) / 2
	replacementInst := (instOf(victim) + 1) % n
	work := func(worker int) time.Duration { return time.Duration(worker) * d.cfg.workStep }

	latch := coord.dc.CountDownLatch(jobsKey)
	ok, err := latch.TrySetCount(ctx, workers)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("TrySetCount(%d): latch %q was set already", workers, jobsKey)
	}
	count, err := latch.Count(ctx)
	if err != nil {
		return err
	}
	d.printf("The coordinator, on a Client of its own, set CountDownLatch %q with TrySetCount(%d)\n", jobsKey, workers)
	d.printf("(Count = %d) and awaits it. %d workers on clients %s-%s each do a job, worker i for i x %v,\n",
		count, workers, instanceName(0), instanceName(n-1), d.cfg.workStep)
	d.printf("then CountDown. Worker %d is killed half-way through its job.\n", victim)

	// On the way out, whatever happened: stop the workers and the coordinator, and wait
	// for them before their Clients close.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	var countedDown atomic.Int64 // count-downs begun: all of them must have when Await returns
	start := time.Now()
	at := func(t time.Time) string { return fmt.Sprintf("+%8s", ms(t.Sub(start))) }
	rel := make(chan released, 1)
	wg.Go(func() {
		err := latch.Await(ctx)
		rel <- released{time.Now(), countedDown.Load(), err}
	})

	// runJob does a worker's job on dc and counts it down. hook, if not nil, runs half-way
	// through the job and returns what stops it there, if anything does.
	runJob := func(ctx context.Context, dc *dsync.Client, worker int, hook func() error) jobDone {
		half := work(worker) / 2
		err := sleep(ctx, half)
		if err == nil && hook != nil {
			err = hook()
		}
		if err == nil {
			err = sleep(ctx, work(worker)-half)
		}
		if err != nil {
			return jobDone{worker: worker, at: time.Now(), err: err}
		}
		l := dc.CountDownLatch(jobsKey)
		done := jobDone{worker: worker, at: time.Now()}
		countedDown.Add(1)
		if done.err = l.CountDown(ctx); done.err == nil {
			done.count, done.err = l.Count(ctx)
		}
		return done
	}

	events := make(chan jobDone, workers)
	halfway := make(chan struct{})
	victimCtx, kill := context.WithCancel(ctx)
	defer kill()
	for worker := 1; worker <= workers; worker++ {
		var hook func() error
		wctx := ctx
		if worker == victim {
			wctx = victimCtx
			// Half-way through its job the victim's process is killed: it runs no further.
			hook = func() error {
				close(halfway)
				<-wctx.Done()
				return wctx.Err()
			}
		}
		dc := pool[instOf(worker)].dc
		wg.Go(func() { events <- runJob(wctx, dc, worker, hook) })
	}

	var killedAt time.Time
	for pending := workers; pending > 0; {
		select {
		case <-halfway:
			halfway = nil
			killedAt = time.Now()
			kill()
		case e := <-events:
			pending--
			name := instanceName(instOf(e.worker))
			switch {
			case e.worker == victim && errors.Is(e.err, context.Canceled) && !killedAt.IsZero():
				d.printf("  %s  client %s  worker %-3d KILLED half-way through its job: it never counts down\n",
					at(killedAt), name, e.worker)
			case e.err != nil:
				return fmt.Errorf("worker %d on client %s: %w", e.worker, name, e.err)
			default:
				d.printf("  %s  client %s  worker %-3d job done, CountDown; Count now %d\n", at(e.at), name, e.worker, e.count)
			}
		case r := <-rel:
			return fmt.Errorf("the coordinator's Await returned (%v) after %d count-downs of %d, with worker %d dead",
				r.err, r.countedDown, workers, victim)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	count, err = latch.Count(ctx)
	if err != nil {
		return err
	}
	if count != 1 {
		return fmt.Errorf("the count is %d with every worker but one done, want 1", count)
	}
	select {
	case r := <-rel:
		return fmt.Errorf("the coordinator's Await returned (%v) with Count = %d", r.err, count)
	default:
	}
	d.printf("  %s  %d of %d workers done, Count = %d: the coordinator still waits, and would for ever:\n",
		at(time.Now()), workers-1, workers, count)
	d.printf("%13s the latch counts count-downs, not workers, and nothing tells it worker %d died.\n", "", victim)

	replacement := pool[replacementInst].dc
	rname := instanceName(replacementInst)
	d.printf("  %s  client %s  worker %d' replaces worker %d and does its job from the start\n",
		at(time.Now()), rname, victim, victim)
	wg.Go(func() { events <- runJob(ctx, replacement, victim, nil) })
	var e jobDone
	select {
	case e = <-events:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.err != nil {
		return fmt.Errorf("worker %d' on client %s: %w", victim, rname, e.err)
	}
	d.printf("  %s  client %s  worker %d' job done, CountDown; Count now %d\n", at(e.at), rname, victim, e.count)

	var r released
	select {
	case r = <-rel:
	case <-ctx.Done():
		return fmt.Errorf("the coordinator's Await did not return after the last count-down: %w", ctx.Err())
	}
	if r.err != nil {
		return fmt.Errorf("the coordinator's Await: %w", r.err)
	}
	if r.countedDown != int64(workers) {
		return fmt.Errorf("the coordinator's Await returned after %d count-downs of %d", r.countedDown, workers)
	}
	d.printf("  %s  coordinator  Await returned: all %d jobs are done\n", at(r.at), workers)

	if err := checkGone(ctx, coord.rdb, jobsKey, "the last CountDown"); err != nil {
		return err
	}
	d.printf("The coordinator went on only after all %d count-downs, the replacement's included; the last one\n", workers)
	d.printf("deleted the latch (EXISTS %s = 0) and woke every awaiter with one message.\n", jobsKey)
	return nil
}
