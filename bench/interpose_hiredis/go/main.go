// hiredis_get's Go counterpart: CLIENTS goroutines each doing GET in a loop through
// github.com/redis/go-redis (one pool, one connection per goroutine), for SECONDS.
//
//	go run . PORT [CLIENTS [SECONDS]]
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	port := os.Args[1]
	clients := 1000
	secs := 3.0
	if len(os.Args) > 2 {
		clients, _ = strconv.Atoi(os.Args[2])
	}
	if len(os.Args) > 3 {
		secs, _ = strconv.ParseFloat(os.Args[3], 64)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, PoolSize: clients, MinIdleConns: clients})
	if err := rdb.Set(ctx, "bench:key", "value", 0).Err(); err != nil {
		panic(err)
	}
	var stop atomic.Bool
	var ops atomic.Int64
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(clients)
	done.Add(clients)
	for i := 0; i < clients; i++ {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			n := int64(0)
			for !stop.Load() {
				v, err := rdb.Get(ctx, "bench:key").Result()
				if err != nil || v != "value" {
					panic(fmt.Sprint("bad reply ", v, err))
				}
				n++
			}
			ops.Add(n)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	time.Sleep(time.Duration(secs * float64(time.Second)))
	stop.Store(true)
	dt := time.Since(t0).Seconds()
	done.Wait()
	fmt.Printf("RESULT mode=go-redis clients=%d ops_per_sec=%.0f gomaxprocs=%d\n", clients, float64(ops.Load())/dt, runtime.GOMAXPROCS(0))
}
