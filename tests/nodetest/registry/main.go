// Command registry is the test node's image registry: it builds the
// images a JSON file describes, stores them in go-containerregistry's
// in-memory registry, then serves that registry on -listen and writes
// the address it serves on to -ready (only then: a client that reads the
// file finds every image).
//
//	registry -listen IP:0 -images images.json -ready FILE
//
// images.json is a list of ociimage.Entry: each image is stored under its
// target (repository path and tag). tests/nodetest runs it as a program
// of its own, built without the race detector: building and storing
// hundreds of megabytes in a test binary built with it would cost
// minutes of every node's start.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/saltbush/saltbush/tests/nodetest/ociimage"
)

func main() {
	listen := flag.String("listen", "", "address to serve the registry on (IP:port; port 0 picks one)")
	images := flag.String("images", "", "JSON file of the images to build and serve")
	ready := flag.String("ready", "", "file to write the served address to once every image is stored")
	flag.Parse()
	if *listen == "" || *images == "" || *ready == "" {
		log.Fatal("usage: registry -listen IP:port -images FILE -ready FILE")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *listen, *images, *ready); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, listen, imagesFile, ready string) error {
	b, err := os.ReadFile(imagesFile)
	if err != nil {
		return err
	}
	var entries []ociimage.Entry
	if err := json.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("%s: %w", imagesFile, err)
	}
	handler := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	// The images are stored through a loopback listener of this process's
	// own, before the registry is served where the node pulls.
	store, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	storeSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = storeSrv.Serve(store) }()
	for _, e := range entries {
		img, err := e.Image.Build()
		if err != nil {
			return err
		}
		dst, err := name.NewTag(store.Addr().String()+"/"+e.Target, name.Insecure)
		if err != nil {
			return fmt.Errorf("image %s: %w", e.Target, err)
		}
		if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("store %s: %w", e.Target, err)
		}
	}
	_ = storeSrv.Close()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tmp := ready + ".tmp"
	if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, ready); err != nil {
		return err
	}
	log.Printf("serving %d images on %s", len(entries), ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
