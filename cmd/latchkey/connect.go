package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// envRedisURL names the environment variable read when --redis is not given.
const envRedisURL = "REDIS_URL"

// defaultRedisURL is the server used when neither --redis nor REDIS_URL names one.
const defaultRedisURL = "redis://localhost:6379"

// redisFlag adds --redis to fs and returns where its value goes.
func redisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", "", "the Redis server's `URL`: redis://[user:password@]host:port[/db], rediss:// for TLS, "+
		"?addr=host:port for each further Cluster node, ?master_set=NAME for Sentinel (default $"+envRedisURL+", else "+defaultRedisURL+")")
}

// redisOptions turns the --redis value (or REDIS_URL, or the default) into rueidis options,
// with rueidis' own URL parsing so every form it knows works here. A bad URL is a bad
// command line: the error names where the URL came from.
func redisOptions(flagURL string) (rueidis.ClientOption, error) {
	url, from := flagURL, "--redis"
	if url == "" {
		url, from = os.Getenv(envRedisURL), envRedisURL
	}
	if url == "" {
		url = defaultRedisURL
	}
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return opt, fmt.Errorf("%s %q: %v", from, url, err)
	}
	// latchkey reads no key twice: client-side caching would only cost a CLIENT TRACKING
	// handshake, which some proxies and managed servers refuse.
	opt.DisableCache = true
	return opt, nil
}

// session is a command's connection: the rueidis client and, for commands that take or
// change primitives, the dsync Client on it.
type session struct {
	rdb rueidis.Client
	c   *dsync.Client
}

// dialRedis opens a rueidis client with opt. rueidis dials at once, so a server that cannot
// be reached fails here, with the addresses tried.
func dialRedis(opt rueidis.ClientOption) (rueidis.Client, error) {
	rdb, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to Redis at %v: %w", opt.InitAddress, err)
	}
	return rdb, nil
}

// connectURL is connect for subcommand cmd on the server its --redis value url names (see
// redisOptions): a bad URL is a bad command line, said on stderr (usageMessage).
func connectURL(cmd, url string, stderr io.Writer) (*session, error) {
	opt, err := redisOptions(url)
	if err != nil {
		return nil, usageMessage(stderr, cmd, err)
	}
	return connect(opt)
}

// connect opens the rueidis client (dialRedis) and a dsync Client on it with opts.
func connect(opt rueidis.ClientOption, opts ...dsync.Option) (*session, error) {
	rdb, err := dialRedis(opt)
	if err != nil {
		return nil, err
	}
	c, err := dsync.New(rdb, opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &session{rdb: rdb, c: c}, nil
}

// closeTimeout bounds how long a command, as it ends, gives back what its Client still has
// in Redis (a waiter's place, withdrawn as a signal ended the wait): past it, that lapses by
// itself.
const closeTimeout = 2 * time.Second

// close shuts the dsync Client down (see Client.Shutdown), then closes the rueidis client,
// as dsync.New asks.
func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = s.c.Shutdown(ctx) // what it could not give back lapses by itself
	s.rdb.Close()
}

// ping checks the server answers, so that a command fails with a clear error at once.
func (s *session) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.rdb.Do(ctx, s.rdb.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("no answer to PING: %w", err)
	}
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
