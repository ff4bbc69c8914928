// Package launcher starts, pauses, stops and kills child processes and
// keeps their logs: the one way the programs and tests of this module run
// a `shardfence` process (a sidecar, a master, the kv example) or a test
// server (MinIO, Azurite, ...) as a real process, so it can die by
// SIGKILL or freeze by SIGSTOP.
package launcher

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/shardfence/shardfence/internal/syncbuf"
)

// Command is how to run a program: an executable and the environment it
// needs besides this process's own.
type Command struct {
	Path string
	Env  []string
}

// Spec is one process to start.
type Spec struct {
	// Label names the process in errors ("sidecar A").
	Label string
	Args  []string
	// Env is added (NAME=VALUE) after the Command's: store URLs travel
	// here, never on the command line.
	Env []string
	// Ready, when set, is the start of the stdout line that says the
	// process serves; the rest of that line is its Addr. Start waits for
	// it up to Timeout (default 60 s).
	Ready   string
	Timeout time.Duration
	// Output receives stderr, and stdout too when Ready is empty. By
	// default both go to an in-memory log (Log).
	Output io.Writer
	// Group runs the process in its own process group, killed when this
	// process dies; signals then go to the whole group.
	Group bool
}

// DefaultTimeout is how long Start waits for the Ready line by default.
const DefaultTimeout = 60 * time.Second

// Proc is a running (or ended) process.
type Proc struct {
	Label string
	Cmd   *exec.Cmd
	// Addr is what the process printed after Spec.Ready.
	Addr  string
	group bool
	log   *syncbuf.Buffer // nil when Spec.Output was given
	done  chan struct{}
	err   error // Wait's error; read after done is closed
}

// Start runs c with s.Args and, when s.Ready is set, waits until the
// process prints its ready line. A process that exits first, or does not
// report within the timeout (it is killed then), is an error that carries
// its log.
func Start(c Command, s Spec) (*Proc, error) {
	cmd := exec.Command(c.Path, s.Args...)
	cmd.Env = append(append(os.Environ(), c.Env...), s.Env...)
	p := &Proc{Label: s.Label, Cmd: cmd, group: s.Group, done: make(chan struct{})}
	out := s.Output
	if out == nil {
		p.log = &syncbuf.Buffer{}
		out = p.log
	}
	cmd.Stderr = out
	var stdout io.Reader
	if s.Ready == "" {
		cmd.Stdout = out
	} else {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stdout = pipe
	}
	if s.Group {
		cmd.SysProcAttr = groupAttr()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Label, err)
	}
	var addrc chan string
	if stdout != nil {
		addrc = make(chan string, 1)
		go scanReady(stdout, s.Ready, addrc)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if addrc == nil {
		return p, nil
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	select {
	case p.Addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before serving: %v\n%s", s.Label, p.err, p.Log())
	case <-time.After(timeout):
		p.Kill()
		return nil, fmt.Errorf("%s did not report its address in %v\n%s", s.Label, timeout, p.Log())
	}
}

// scanReady reads stdout to its end (so the process never blocks on a
// full pipe) and hands over the rest of the first line starting with
// ready.
func scanReady(stdout io.Reader, ready string, addrc chan<- string) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), ready); ok {
			select {
			case addrc <- a:
			default:
			}
		}
	}
}

// PID is the process's id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Log is what the process wrote so far to the in-memory log ("" when
// Spec.Output took it).
func (p *Proc) Log() string {
	if p.log == nil {
		return ""
	}
	return p.log.String()
}

// Signal sends sig to the process (to its group, with Spec.Group).
func (p *Proc) Signal(sig os.Signal) error {
	if p.group {
		s, ok := sig.(syscall.Signal)
		if !ok {
			return fmt.Errorf("signal %v to the group of %s: not a syscall.Signal", sig, p.Label)
		}
		return syscall.Kill(-p.PID(), s)
	}
	return p.Cmd.Process.Signal(sig)
}

// Pause freezes the process (SIGSTOP).
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// Kill sends SIGKILL (resuming the process first, if it was paused) and
// waits for it to end.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.Resume()
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the process to end, then
// kills it.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	if _, ok := p.WaitExit(grace); !ok {
		p.Kill()
	}
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error (nil for exit 0); only meaningful once
// it has Exited.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// WaitExit waits up to timeout for the process to end and returns its exit
// error; ok is false if it is still running.
func (p *Proc) WaitExit(timeout time.Duration) (err error, ok bool) {
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(timeout):
		return nil, false
	}
}
