package main

import (
	"flag"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// goRunner is the real image's /go-runner (Kubernetes' kube-log-runner,
// module k8s.io/component-base, logs/kube-log-runner): it runs the command
// line after its own flags with stdout (and, with --redirect-stderr, the
// default, stderr) to --log-file and/or its own stdout, forwards
// termination signals, and exits 0 when the command succeeded, 1 otherwise. Log rotation
// (--log-file-size, --log-file-age, --flush-interval) is accepted and not
// done: the test node's logs are the container runtime's.
func goRunner(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("go-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flushInterval := fs.Duration("flush-interval", 0, "interval to flush log file to disk")
	logFile := fs.String("log-file", "", "If non-empty, save stdout to this file")
	logFileSize := fs.String("log-file-size", "0", "rotate the log file at this size (not done here)")
	logFileAge := fs.Duration("log-file-age", 0, "remove log files older than this (not done here)")
	alsoStdout := fs.Bool("also-stdout", false, "useful with log-file, log to standard output as well as the log file")
	redirectStderr := fs.Bool("redirect-stderr", true, "treat stderr same as stdout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The command's output and go-runner's own lines may share a writer.
	stdout, stderr = lock(stdout), lock(stderr)
	l := log.New(stderr, "", log.LstdFlags)
	if fs.NArg() == 0 {
		l.Print("not enough arguments to run")
		return 1
	}
	out, errOut := stdout, stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			l.Printf("failed to create log file %v: %v", *logFile, err)
			return 1
		}
		defer func() { _ = f.Close() }()
		out = lock(f)
		if *alsoStdout {
			out = lock(io.MultiWriter(stdout, f))
		}
	}
	if *redirectStderr {
		errOut = out
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = out, errOut
	l.Printf("Running command:\nCommand env: (enable-flush=%v, log-file=%v, log-file-size=%v, log-file-age=%v, also-stdout=%v, redirect-stderr=%v)\nRun from directory: %v\nExecutable path: %v\nArgs (comma-delimited): %v",
		*flushInterval, *logFile, *logFileSize, *logFileAge, *alsoStdout, *redirectStderr, cmd.Dir, cmd.Path, strings.Join(cmd.Args, ","))
	// Notify before the start, so that no signal falls between the two.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	defer func() {
		signal.Stop(sigs)
		close(sigs)
	}()
	if err := cmd.Start(); err != nil {
		l.Printf("starting command: %v", err)
		return 1
	}
	go func() {
		l.Println("Now listening for interrupts")
		for s := range sigs {
			l.Printf("Got signal: %v. Sending down to process (PID: %v)", s, cmd.Process.Pid)
			if err := cmd.Process.Signal(s); err != nil {
				l.Printf("Failed to signal process: %v", err)
			}
		}
	}()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	// As kube-log-runner: any failure of the command is exit status 1.
	l.Printf("running command: %v", err)
	return 1
}

// lockedWriter serializes writes to a writer that several goroutines use.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func lock(w io.Writer) io.Writer {
	switch w := w.(type) {
	case lockedWriter:
		return w
	case *os.File: // the command gets the file itself, as from kube-log-runner
		return w
	}
	return lockedWriter{mu: &sync.Mutex{}, w: w}
}
