package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes returns this process's CPU time and the whole machine's busy time: every CPU's user,
// nice, system, irq and softirq time (idle and iowait left out, steal too, which is another
// virtual machine's, and guest time, which user already counts).
func cpuTimes() (self, all time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, false
	}
	var ticks int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal, guest, guest_nice
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += v
	}
	return self, time.Duration(ticks) * 10 * time.Millisecond, true // USER_HZ is 100 on Linux
}
