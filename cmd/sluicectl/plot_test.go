package main

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/simulate"
)

// decodePNG decodes file as a PNG and returns the image.
func decodePNG(t *testing.T, file string) image.Image {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", file, err)
	}
	return img
}

// colours counts the distinct colours of img: a blank canvas has one.
func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

// figureTrace is the drive of docs/algorithms.png (make plots): 30 requests 900ms into a window,
// then 25/s for 3s, so a window boundary falls 100ms after the burst.
var figureTrace = arrivals(900, 0, 30) + arrivals(940, 40, 75)

func TestSimulatePlot(t *testing.T) {
	tests := map[string]struct{ args, input string }{
		"fixed window, every decision": {"--algorithm FixedWindow --limit 10 --window 1s", figureTrace},
		"summary":                      {"--algorithm SlidingWindowLog --limit 100 --window 60s --summary", boundary},
		"queue prints delays":          {"--algorithm LeakyBucket --limit 10 --window 1s --mode Queue --max-delay 1s", figureTrace},
		"own bucket":                   {"--algorithm TokenBucket --limit 10 --window 1s --burst 5 --plot-bucket 250ms", figureTrace},
		"no arrivals":                  {"--algorithm SlidingWindowCounter --limit 1 --window 1s", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var want, wantErr bytes.Buffer
			if code := runSimulate(strings.Fields(tc.args), strings.NewReader(tc.input), &want, &wantErr); code != 0 {
				t.Fatalf("without --plot: exit %d, stderr %q", code, wantErr.String())
			}
			file := filepath.Join(t.TempDir(), "trace.png")
			var stdout, stderr bytes.Buffer
			args := append(strings.Fields(tc.args), "--plot", file)
			if code := runSimulate(args, strings.NewReader(tc.input), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if stdout.String() != want.String() {
				t.Errorf("--plot changed the output:\n%s\nwant:\n%s", stdout.String(), want.String())
			}
			img := decodePNG(t, file)
			if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 450 {
				t.Errorf("image is %dx%d, want 800x450", b.Dx(), b.Dy())
			}
			if n := colours(img); n < 10 {
				t.Errorf("image has %d colours: nothing drawn?", n)
			}
		})
	}
}

func TestSimulatePlotErrors(t *testing.T) {
	const ok = "--algorithm FixedWindow --limit 1 --window 1s"
	dir := t.TempDir()
	runErrorCases(t, map[string]errorCase{
		"bucket not in ms": {ok + " --plot x.png --plot-bucket 1500us", "", 2, "", "plot-bucket 1.5ms is not a whole number of milliseconds"},
		"negative bucket":  {ok + " --plot x.png --plot-bucket -1s", "", 2, "", "plot-bucket -1s is not"},
		// The text comes first and is complete; the plot fails after it.
		"unwritable file": {ok + " --plot " + filepath.Join(dir, "no", "such", "dir.png"), arrivals(0, 0, 1), 1,
			decisions(0, "allow") + "allowed=1 denied=0\n", "no such file or directory"},
		"too many buckets": {"--algorithm FixedWindow --limit 1 --window 24h --plot-bucket 1ms --plot " + filepath.Join(dir, "big.png"),
			arrivals(0, 0, 1), 1, decisions(0, "allow") + "allowed=1 denied=0\n", "raise --plot-bucket"},
		"bad input draws nothing": {ok + " --plot " + filepath.Join(dir, "bad.png"), "x\n", 1, "", `line 1: "x" is not a whole number`},
	})
	if _, err := os.Stat(filepath.Join(dir, "bad.png")); !os.IsNotExist(err) {
		t.Errorf("a plot was written for bad input: %v", err)
	}
}

// The numbers the README quotes for docs/algorithms.png: the fixed window lets 2x the limit
// through around its boundary, the sliding log never more than the limit, the buckets their
// burst plus what refills in 999ms, the queue the limit (it spaces requests 100ms apart).
const figureTable = `algorithm             allowed   denied  max in any 1s
FixedWindow                40       65             20
SlidingWindowLog           31       74             10
SlidingWindowCounter       37       68             18
TokenBucket                40       65             19
LeakyBucket/Meter          40       65             19
LeakyBucket/Queue          40       65             10
`

func TestCompare(t *testing.T) {
	file := filepath.Join(t.TempDir(), "algorithms.png")
	args := "compare --algorithms FixedWindow,SlidingWindowLog,SlidingWindowCounter,TokenBucket,LeakyBucket/Meter,LeakyBucket/Queue" +
		" --limit 10 --window 1s --burst 10 --max-delay 1s --plot " + file
	var stdout, stderr bytes.Buffer
	if code := runSimulate(strings.Fields(args), strings.NewReader(figureTrace), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if stdout.String() != figureTable {
		t.Errorf("table:\n%s\nwant:\n%s", stdout.String(), figureTable)
	}
	img := decodePNG(t, file)
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 36+6*190 {
		t.Errorf("image is %dx%d, want 800x%d", b.Dx(), b.Dy(), 36+6*190)
	}

	// Each row agrees with simulate --summary on the same trace: the same replay, the same store.
	for _, line := range strings.Split(strings.TrimSpace(figureTable), "\n")[1:] {
		f := strings.Fields(line)
		alg, mode, _ := strings.Cut(f[0], "/")
		sargs := "--algorithm " + alg + " --limit 10 --window 1s --burst 10 --max-delay 1s --summary"
		if mode != "" {
			sargs += " --mode " + mode
		}
		var out bytes.Buffer
		runSimulate(strings.Fields(sargs), strings.NewReader(figureTrace), &out, &stderr)
		if want := fmt.Sprintf("allowed=%s denied=%s\n", f[1], f[2]); out.String() != want {
			t.Errorf("%s: simulate says %q, compare %q", f[0], out.String(), want)
		}
	}
}

func TestCompareDefaultsAndErrors(t *testing.T) {
	// The seed's boundary trace through the five algorithms (TestSimulate has the first three):
	// the buckets start full and refill 100 per 60s, 3 more over the trace's 2s.
	var stdout, stderr bytes.Buffer
	if code := runSimulate([]string{"compare", "--limit", "100", "--window", "60s"}, strings.NewReader(boundary), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	want := `algorithm             allowed   denied  max in any 1m0s
FixedWindow               200        1              200
SlidingWindowLog          100      101              100
SlidingWindowCounter      101      100              101
TokenBucket               103       98              103
LeakyBucket               103       98              103
`
	if stdout.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", stdout.String(), want)
	}

	const ok = "compare --limit 1 --window 1s"
	runErrorCases(t, map[string]errorCase{
		"bad algorithm":       {ok + " --algorithms FixedWindow,GCRA", "", 2, "", `algorithm "GCRA"`},
		"mode on a window":    {ok + " --algorithms FixedWindow/Queue", "", 2, "", `"FixedWindow/Queue": only LeakyBucket takes a mode`},
		"bad mode":            {ok + " --algorithms LeakyBucket/Drop", "", 2, "", "only LeakyBucket takes a mode, Meter or Queue"},
		"no limit":            {"compare --window 1s", "", 2, "", "limit 0 is outside"},
		"zero cost":           {ok + " --cost 0", "", 2, "", "cost 0 is below 1"},
		"unknown store":       {ok + " --store etcd", "", 2, "", `unknown store "etcd"`},
		"extra argument":      {ok + " trace.txt", "", 2, "", `unexpected argument "trace.txt"`},
		"bad bucket":          {ok + " --plot-bucket 0.5ms", "", 2, "", "plot-bucket 500µs is not"},
		"bad input":           {ok, fmt.Sprintf("%d\n%d\n", t0, t0-1), 1, "", "FixedWindow: line 2: 1770249599999 is before the arrival before it"},
		"unknown flag":        {ok + " --algorithm FixedWindow", "", 2, "", "flag provided but not defined: -algorithm"},
		"log limit too large": {"compare --limit 10001 --window 1s", "", 2, "", "the most SlidingWindowLog keeps"},
	})
}

// make plots wrote docs/algorithms-trace.txt and docs/algorithms.txt from the drive and the
// command above; the README quotes the table. This fails when one changed without the other:
// run make plots and commit docs/.
func TestFigureIsCurrent(t *testing.T) {
	for file, want := range map[string]string{
		"../../docs/algorithms-trace.txt": figureTrace,
		"../../docs/algorithms.txt":       figureTable,
	} {
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale (run make plots):\n%s\nwant:\n%s", file, got, want)
		}
	}
}

// leaseFigureTrace is the drive of docs/lease.png (make plot-lease): 50/s for 3.5 s, 200 at
// once, then 200/s for 2 s.
var leaseFigureTrace = arrivals(0, 20, 175) + arrivals(3500, 0, 200) + arrivals(3505, 5, 400)

const leaseFigureArgs = "--algorithm TokenBucket --limit 100 --window 1s --burst 100 --pods 2 --lease-max-age 1s"

// TestLeasePlot: the figure's trace and report in docs/ are what make plot-lease writes (the
// README quotes them), the leased run there admits more than the exact rule in some second yet
// keeps the bound, and --plot draws both runs without changing the report. A FixedWindow rule
// and no arrivals draw too.
func TestLeasePlot(t *testing.T) {
	trace, err := os.ReadFile("../../docs/lease-trace.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(trace) != leaseFigureTrace {
		t.Errorf("docs/lease-trace.txt is not the figure's drive: run make plot-lease")
	}
	report, err := os.ReadFile("../../docs/lease.txt")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ args, input string }{
		"figure":       {leaseFigureArgs, leaseFigureTrace},
		"fixed window": {"--algorithm FixedWindow --limit 100 --window 1s --pods 3 --lease-max-age 300ms", leaseFigureTrace},
		"no arrivals":  {leaseFigureArgs, ""},
	} {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			var want, stderr bytes.Buffer
			if code := runSimulate(strings.Fields(args), strings.NewReader(tc.input), &want, &stderr); code != 0 {
				t.Fatalf("without --plot: exit %d, stderr %q", code, stderr.String())
			}
			if name == "figure" {
				if want.String() != string(report) {
					t.Errorf("docs/lease.txt is stale (run make plot-lease):\n%s\nwant:\n%s", report, want.String())
				}
				var excess int
				if _, err := fmt.Sscanf(want.String()[strings.Index(want.String(), "worst excess"):], "worst excess over exact: %d", &excess); err != nil || excess == 0 {
					t.Errorf("the figure's leased run never admits more than the exact one (%v):\n%s", err, want.String())
				}
				// The README's numbers: the most in any second, exact and leased.
				lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100, Window: time.Second, Burst: 100}
				arr, err := simulate.ReadFleetTrace(strings.NewReader(leaseFigureTrace), 2)
				if err != nil {
					t.Fatal(err)
				}
				rep, err := simulate.ReplayFleet(arr, func() (lease.Store, func(), error) {
					return limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), func() {}, nil
				}, lim, 1, simulate.Fleet{Pods: 2, Lease: lease.Params{MaxAge: time.Second}})
				if err != nil {
					t.Fatal(err)
				}
				if e, l := rep.MostInWindow(); e != 199 || l != 222 {
					t.Errorf("the most in any second: exact %d, leased %d; the README says 199 and 222", e, l)
				}
				if !strings.Contains(want.String(), ": holds\n") {
					t.Errorf("the figure's leased run breaks the bound:\n%s", want.String())
				}
			}
			file := filepath.Join(t.TempDir(), "lease.png")
			var stdout bytes.Buffer
			if code := runSimulate(append(strings.Fields(args), "--plot", file), strings.NewReader(tc.input), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if stdout.String() != want.String() {
				t.Errorf("--plot changed the output:\n%s\nwant:\n%s", stdout.String(), want.String())
			}
			img := decodePNG(t, file)
			if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 36+2*250 {
				t.Errorf("image is %dx%d, want 800x%d", b.Dx(), b.Dy(), 36+2*250)
			}
			if n := colours(img); n < 10 && tc.input != "" {
				t.Errorf("image has %d colours: nothing drawn?", n)
			}
		})
	}
	runErrorCases(t, map[string]errorCase{
		"summary": {leaseFigureArgs + " --summary", "", 2, "", "--summary does not go with a leased rule"},
	})
	// The report comes first and is complete; the plot fails after it.
	var stdout, stderr bytes.Buffer
	args := append(strings.Fields(leaseFigureArgs), "--plot", filepath.Join(t.TempDir(), "no", "dir.png"))
	if code := runSimulate(args, strings.NewReader(leaseFigureTrace), &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no such file or directory") || stdout.String() != string(report) {
		t.Errorf("unwritable plot: exit %d, stderr %q, stdout %q", code, stderr.String(), stdout.String())
	}
}
