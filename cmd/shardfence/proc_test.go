package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one shardfence process a multi-process test runs: the test
// binary itself, run as the command (see TestMain).
type proc struct {
	name   string
	cmd    *exec.Cmd
	addr   string // what the process reported after listenPrefix
	stderr *syncBuffer
	done   chan error
}

// spawn starts `shardfence args...` with env added (store URLs travel
// there, never on the command line) and waits for the line starting with
// listenPrefix on its stdout. The process is killed (resumed first, if a
// test stopped it) when the test ends, and its log shown if the test
// failed.
func spawn(t *testing.T, name, listenPrefix string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), asBinaryEnv+"=1"), env...)
	p := &proc{name: name, cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), listenPrefix); ok {
				addrc <- a
			}
		}
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.stderr.String())
		}
	})
	select {
	case p.addr = <-addrc:
	case err := <-p.done:
		t.Fatalf("%s exited before serving: %v\n%s", name, err, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report its address\n%s", name, p.stderr.String())
	}
	return p
}
