package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace bounds how long a process may take to exit after SIGTERM before
// it is killed.
const stopGrace = 10 * time.Second

// process is one control-plane program started by the harness, its output
// going to a log file in the cluster's directory.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	// done is closed when the process has exited; err is its exit status,
	// written before done is closed.
	done chan struct{}
	err  error
}

// startProcess starts path with args, its stdout and stderr appended to
// logPath.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Pdeathsig kills the program when the test binary dies, even by
	// SIGKILL, so no control plane outlives its test. (Linux sends it when
	// the thread that started the child exits; the Go runtime does not end
	// threads of goroutines that never lock one, so that is the process's
	// death.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go p.wait(logFile)
	return p, nil
}

// wait records the exit of the process; the one goroutine that calls
// cmd.Wait.
func (p *process) wait(logFile *os.File) {
	err := p.cmd.Wait()
	_ = logFile.Close()
	p.err = err
	close(p.done)
}

// exited reports whether the process has exited, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM, and SIGKILL if the process has not exited after
// stopGrace; it returns once the process is gone.
func (p *process) stop() {
	if ok, _ := p.exited(); ok {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exitError describes an unexpected exit with the end of the log.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.name, p.err, p.logPath, p.logTail())
}

// logTailBytes is how much of a log an error quotes: enough for the
// reason a program stopped, short enough to read in a test failure.
const logTailBytes = 4096

// logTail returns the last lines of the process's log.
func (p *process) logTail() string {
	return fileTail(p.logPath, logTailBytes)
}

// fileTail returns up to the last n bytes of a file, from a line start.
func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	offset := max(info.Size()-n, 0)
	buf := make([]byte, info.Size()-offset)
	if _, err := f.ReadAt(buf, offset); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if offset > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return strings.TrimRight(string(buf), "\n")
}
