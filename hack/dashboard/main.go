// Command dashboard writes Sluice's Grafana dashboard (internal/dashboard) to the file named by
// its argument; make manifests runs it into config/grafana/sluice.json.
package main

import (
	"fmt"
	"os"

	"github.com/sluice-dev/sluice/internal/dashboard"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard FILE.json")
		os.Exit(2)
	}
	out, err := dashboard.Grafana()
	if err == nil {
		err = os.WriteFile(os.Args[1], out, 0o644) //nolint:gosec // the path is make manifests' argument
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}
