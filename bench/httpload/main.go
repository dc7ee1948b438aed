// httpload is the bench's closed-loop HTTP client, for a peer whose ingress is HTTP: the
// same shape of run as ghz gives the gRPC targets (a fixed number of callers, each making
// its next call when the last one answered, for a duration or a count), and the same JSON
// summary as ghz's --format json (count, rps, latencyDistribution, statusCodeDistribution),
// so that bench/run.py reads both alike.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type percentile struct {
	Percentage int   `json:"percentage"`
	Latency    int64 `json:"latency"` // nanoseconds, as ghz gives them
}

type summary struct {
	Count    int64            `json:"count"`
	Rps      float64          `json:"rps"`
	Latency  []percentile     `json:"latencyDistribution"`
	Statuses map[string]int64 `json:"statusCodeDistribution"`
}

func main() {
	url := flag.String("url", "", "the URL each call POSTs to")
	body := flag.String("body", "{}", "the JSON body; {{n}} is the call's number")
	concurrency := flag.Int("c", 1, "callers, each one call at a time")
	duration := flag.Duration("z", 0, "how long to call (the calls in flight then finish)")
	total := flag.Int64("n", 0, "how many calls, when no duration is given")
	timeout := flag.Duration("timeout", 20*time.Second, "one call's deadline")
	flag.Parse()
	if *url == "" || (*duration == 0 && *total == 0) {
		fmt.Fprintln(os.Stderr, "httpload: -url and one of -z or -n are needed")
		os.Exit(2)
	}
	client := &http.Client{
		Timeout:   *timeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: *concurrency, MaxConnsPerHost: *concurrency},
	}
	var next atomic.Int64
	var mu sync.Mutex
	latencies := make([]time.Duration, 0, 4096)
	statuses := map[string]int64{}
	started := time.Now()
	deadline := started.Add(*duration)
	var wg sync.WaitGroup
	for i := 0; i < *concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1) - 1
				if (*duration > 0 && time.Now().After(deadline)) || (*duration == 0 && n >= *total) {
					return
				}
				payload := strings.ReplaceAll(*body, "{{n}}", strconv.FormatInt(n, 10))
				began := time.Now()
				status := call(client, *url, payload)
				took := time.Since(began)
				mu.Lock()
				latencies = append(latencies, took)
				statuses[status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started)
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	out := summary{Count: int64(len(latencies)), Statuses: statuses}
	if elapsed > 0 {
		out.Rps = float64(len(latencies)) / elapsed.Seconds()
	}
	for _, p := range []int{10, 25, 50, 75, 90, 95, 99} {
		if len(latencies) == 0 {
			break
		}
		at := (len(latencies)*p + 99) / 100
		if at > 0 {
			at--
		}
		out.Latency = append(out.Latency, percentile{p, latencies[at].Nanoseconds()})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// call POSTs one body and names its answer as ghz names a gRPC status: OK, or the HTTP
// status, or the transport's failure.
func call(client *http.Client, url, payload string) string {
	answer, err := client.Post(url, "application/json", bytes.NewBufferString(payload))
	if err != nil {
		return "Unavailable"
	}
	_, _ = io.Copy(io.Discard, answer.Body)
	_ = answer.Body.Close()
	if answer.StatusCode == http.StatusOK {
		return "OK"
	}
	return strconv.Itoa(answer.StatusCode)
}
