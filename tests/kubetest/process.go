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

// Process is one program started for a test (a control-plane program, or a
// node's containerd, kubelet and kube-proxy), its output going to a log
// file.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	// done is closed when the process has exited; err is its exit status,
	// written before done is closed.
	done chan struct{}
	err  error
}

// StartProcess starts path with args, its stdout and stderr appended to
// logPath.
func StartProcess(name, path string, args []string, logPath string) (*Process, error) {
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
	p := &Process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go p.wait(logFile)
	return p, nil
}

// wait records the exit of the process; the one goroutine that calls
// cmd.Wait.
func (p *Process) wait(logFile *os.File) {
	err := p.cmd.Wait()
	_ = logFile.Close()
	p.err = err
	close(p.done)
}

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, and SIGKILL if the process has not exited after
// stopGrace; it returns once the process is gone.
func (p *Process) Stop() {
	if ok, _ := p.Exited(); ok {
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

// ExitError describes an unexpected exit with the end of the log.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.name, p.err, p.logPath, p.LogTail())
}

// logTailBytes is how much of a log an error quotes: enough for the
// reason a program stopped, short enough to read in a test failure.
const logTailBytes = 4096

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail() string {
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

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// LogPath is the file the process's output goes to.
func (p *Process) LogPath() string { return p.logPath }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
