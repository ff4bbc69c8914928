package testservers

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the CPU time (user and system) the process used so far, read from
// /proc (Linux; zero elsewhere or once it has ended). Clock ticks are taken
// as 100 a second, the value Linux reports to user space.
func (p *Process) CPU() time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces), from field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
