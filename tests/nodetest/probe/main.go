// Command probe is the test node's workload image: it serves HTTP, and
// it asks what a pod's tests need to know from inside a pod — whether a
// name resolves (through the pod's own resolver configuration) and
// whether a URL answers.
//
//	probe serve :8080            answer every request with the pod's name
//	probe lookup NAME            print NAME's addresses, exit 1 if none
//	probe get URL                print the body, exit 1 unless 200
//	probe lookup-loop NAME       one lookup per 100 ms, forever, a line each
//	probe sleep                  wait for SIGTERM
//
// It is built from this repository, so the test images need nothing
// pulled; the lookups use Go's own resolver, which reads
// /etc/resolv.conf as the kubelet wrote it (search domains, ndots).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe serve ADDR | lookup NAME | lookup-loop NAME | get URL | sleep")
	}
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	switch os.Args[1] {
	case "serve":
		serve(arg)
	case "lookup":
		addrs, err := lookup(arg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Println(strings.Join(addrs, " "))
	case "lookup-loop":
		lookupLoop(arg)
	case "get":
		get(arg)
	case "sleep":
		waitSignal()
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// resolver is Go's own: it reads /etc/resolv.conf (search, ndots), as a
// pod's libc would.
var resolver = &net.Resolver{PreferGo: true}

func lookup(name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return resolver.LookupHost(ctx, name)
}

// lookupLoop prints "ok ADDRS" or "fail ERROR" with a timestamp every
// 100 ms until SIGTERM: a test counts the failures while coredns rolls.
func lookupLoop(name string) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		addrs, err := lookup(name)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if err != nil {
			fmt.Printf("%s fail %v\n", now, err)
		} else {
			fmt.Printf("%s ok %s\n", now, strings.Join(addrs, ","))
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func get(url string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url) //nolint:gosec // the URL is the test's argument: fetching it is the command's purpose
	if err != nil {
		fail(err.Error())
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	fmt.Print(string(body))
	if resp.StatusCode != http.StatusOK {
		fail(resp.Status)
	}
}

func serve(addr string) {
	name, _ := os.Hostname()
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, name)
	})}
	go func() {
		waitSignal()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fail(err.Error())
	}
}

func waitSignal() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
