package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfence/shardfence/internal/syncbuf"
)

// childEnv makes the test binary act as the child process of a test.
const childEnv = "LAUNCHER_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// child is the test binary run as a launched process.
func child(mode string) {
	switch mode {
	case "serve": // says where it serves, logs, and waits to be killed
		fmt.Println("noise before the ready line")
		fmt.Println("serving at 127.0.0.1:4711")
		fmt.Fprintln(os.Stderr, "child log line")
		time.Sleep(time.Hour)
	case "exit": // fails before serving
		fmt.Fprintln(os.Stderr, "cannot serve: no store")
		os.Exit(3)
	case "silent": // never says it serves
		time.Sleep(time.Hour)
	case "chatty": // the ready line again and again, then a lot more stdout
		for range 3 {
			fmt.Println("serving at 127.0.0.1:4711")
		}
		line := strings.Repeat("x", 1023) + "\n"
		for range 1024 {
			fmt.Print(line)
		}
	case "term": // output without a ready line; exits 0 on SIGTERM
		fmt.Println("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
		time.Sleep(time.Hour)
	}
}

func self(mode string) Command {
	return Command{Path: os.Args[0], Env: []string{childEnv + "=" + mode}}
}

func TestStartWaitsForTheReadyLine(t *testing.T) {
	p, err := Start(self("serve"), Spec{Label: "child", Ready: "serving at "})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Addr != "127.0.0.1:4711" {
		t.Errorf("Addr %q, want the rest of the ready line", p.Addr)
	}
	if p.Exited() {
		t.Fatal("the child exited")
	}
	// The log is stderr, written whenever the child gets to it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.Log(), "child log line"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log %q lacks the child's stderr", p.Log())
		}
	}
	p.Kill()
	if !p.Exited() {
		t.Fatal("Kill returned before the child ended")
	}
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("exit error %v, want killed by SIGKILL", err)
	}
}

func TestStartReportsAChildThatExitsFirst(t *testing.T) {
	_, err := Start(self("exit"), Spec{Label: "child", Ready: "serving at "})
	if err == nil || !strings.Contains(err.Error(), "exited before serving") || !strings.Contains(err.Error(), "cannot serve: no store") {
		t.Fatalf("error %v, want the early exit with the child's log", err)
	}
}

func TestStartKillsAChildThatNeverReports(t *testing.T) {
	_, err := Start(self("silent"), Spec{Label: "child", Ready: "serving at ", Timeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not report its address") {
		t.Fatalf("error %v, want the timeout", err)
	}
}

// A child that prints its ready line more than once, then more than a
// pipe holds, must not block on its stdout: it runs to its end.
func TestStartKeepsReadingStdout(t *testing.T) {
	p, err := Start(self("chatty"), Spec{Label: "child", Ready: "serving at "})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	err, ok := p.WaitExit(time.Minute)
	if !ok {
		t.Fatal("the child blocked writing its stdout")
	}
	if err != nil {
		t.Fatalf("the child exited with %v", err)
	}
}

// procState is the state letter of pid in /proc (T: stopped).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

func TestPauseResumeKillAPausedChild(t *testing.T) {
	p, err := Start(self("serve"), Spec{Label: "child", Ready: "serving at "})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitState := func(want func(string) bool, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st := procState(t, p.PID())
			if want(st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("state %s, want %s", st, what)
			}
		}
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(func(s string) bool { return s == "T" }, "stopped")
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(func(s string) bool { return s != "T" }, "running")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState(func(s string) bool { return s == "T" }, "stopped")
	p.Kill() // a paused process dies too
	if !p.Exited() {
		t.Fatal("Kill returned before the paused child ended")
	}
}

func TestGroupOutputAndStop(t *testing.T) {
	var out syncbuf.Buffer
	p, err := Start(self("term"), Spec{Label: "child", Output: &out, Group: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if pgid, err := syscall.Getpgid(p.PID()); err != nil || pgid != p.PID() {
		t.Errorf("process group %d (%v), want its own (%d)", pgid, err, p.PID())
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "to stdout") || !strings.Contains(out.String(), "to stderr"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q lacks stdout or stderr", out.String())
		}
	}
	if p.Log() != "" {
		t.Errorf("Log %q with Output given, want empty", p.Log())
	}
	p.Stop(10 * time.Second)
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("exit error %v, want ended by SIGTERM", err)
	}
}
