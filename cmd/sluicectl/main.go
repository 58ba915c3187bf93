// Command sluicectl is Sluice's offline tool: it renders policies into the sidecar's
// policies.json and simulates the limiter on a trace of arrivals.
package main

import (
	"flag"
	// Calendar rules name IANA time zones; the images are distroless/static, so the binary
	// carries its own copy of the database rather than trust the image to.
	_ "time/tzdata"

	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/internal/version"
)

const usage = `usage: sluicectl <command> [flags]

commands:
  render     print the policies.json the controller would write for policy files
  simulate   replay arrivals (ms since the epoch, one per line) through a limiter
             (simulate rules: requests against several rules, decided as one unit)
  status     what the sidecars of a namespace decide now, per policy and rule (via the API server)
  quota      get or reset one key's counter of a rule in Redis (remaining, reset time, debt)
  convert    turn another rate limiter's configuration into RateLimitPolicies
             (convert envoy-ratelimit -f config.yaml: envoyproxy/ratelimit's)
  version    print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code: 0 on success, 1 when the
// command failed, 2 for a usage error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "render":
		return runRender(args[1:], stdout, stderr)
	case "simulate":
		return runSimulate(args[1:], stdin, stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "quota":
		return runQuota(args[1:], stdout, stderr)
	case "convert":
		return runConvert(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, version.String("sluicectl"))
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluicectl: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

// strayArgument reports, naming it on stderr, an argument left after fs's flags: Go's flag
// package stops at it and ignores every flag after it.
func strayArgument(fs *flag.FlagSet, stderr io.Writer) bool {
	if fs.NArg() == 0 {
		return false
	}
	fmt.Fprintf(stderr, "sluicectl %s: unexpected argument %q: flags after it would be ignored\n", fs.Name(), fs.Arg(0))
	return true
}
