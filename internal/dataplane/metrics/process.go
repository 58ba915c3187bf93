package metrics

import (
	"bytes"
	"math"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// registerProcess registers the process's standard series, under the names Prometheus's
// clients give them: process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds, go_goroutines, go_threads and go_gc_gogc_percent. Each is read
// at the scrape; one that cannot be read (no /proc) is written as NaN rather than left out.
func registerProcess(r *Registry) {
	start := startTime()
	r.counterFunc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", func() float64 {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return math.NaN()
		}
		return seconds(ru.Utime) + seconds(ru.Stime)
	})
	r.gaugeFunc("process_resident_memory_bytes", "Resident memory size in bytes.", func() float64 { return statm(1) })
	r.gaugeFunc("process_virtual_memory_bytes", "Virtual memory size in bytes.", func() float64 { return statm(0) })
	r.gaugeFunc("process_open_fds", "Number of open file descriptors.", func() float64 {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return math.NaN()
		}
		return float64(len(entries))
	})
	r.gaugeFunc("process_max_fds", "Maximum number of open file descriptors.", func() float64 {
		var l syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
			return math.NaN()
		}
		return float64(l.Cur)
	})
	r.gaugeFunc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", func() float64 { return start })
	r.gaugeFunc("go_goroutines", "Number of goroutines that currently exist.", func() float64 { return float64(runtime.NumGoroutine()) })
	r.gaugeFunc("go_threads", "Number of OS threads created.", func() float64 {
		n, _ := runtime.ThreadCreateProfile(nil)
		return float64(n)
	})
	r.gaugeFunc("go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", func() float64 {
		s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
		rtmetrics.Read(s)
		if s[0].Value.Kind() != rtmetrics.KindUint64 {
			return math.NaN()
		}
		return float64(s[0].Value.Uint64())
	})
}

func seconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// statm returns field i of /proc/self/statm (0 size, 1 resident) in bytes.
func statm(i int) float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return math.NaN()
	}
	f := bytes.Fields(b)
	if len(f) <= i {
		return math.NaN()
	}
	pages, err := strconv.ParseUint(string(f[i]), 10, 64)
	if err != nil {
		return math.NaN()
	}
	return float64(pages) * float64(os.Getpagesize())
}

// clockTicks is USER_HZ, the unit of /proc's process times: 100 on every Linux architecture Go
// builds for.
const clockTicks = 100

// startTime returns when the process started, in seconds since the epoch: the boot time of
// /proc/stat plus the start of /proc/self/stat, or, without /proc, now (the registry is made
// at start).
func startTime() float64 {
	now := float64(time.Now().UnixNano()) / 1e9
	stat, err1 := os.ReadFile("/proc/self/stat")
	sys, err2 := os.ReadFile("/proc/stat")
	if err1 != nil || err2 != nil {
		return now
	}
	// The command name, field 2, is in parentheses and may hold spaces: fields count from the
	// last ')'; starttime is field 22, the 20th after it.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return now
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 20 {
		return now
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return now
	}
	for line := range bytes.SplitSeq(sys, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			boot, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return now
			}
			return float64(boot) + float64(ticks)/clockTicks
		}
	}
	return now
}
