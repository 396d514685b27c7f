// Command k8sinputs builds the Kubernetes test inputs once per machine, into
// the test cache, so that tests never reach a Kubernetes host:
//
//	k8sinputs -stamp bin/stamp
//
// It builds kubelet, kubeadm, kubectl, the control-plane binaries, etcd,
// CoreDNS, crictl, the CNI plugins and pause from the Go module proxy, packages
// the node's as .debs in a signed repository, and builds the control-plane
// images with the given stamp. A second run finds everything cached.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "k8sinputs:", err)
		os.Exit(1)
	}
}

func run() error {
	stamp := flag.String("stamp", "bin/stamp", "the stamp `binary` that builds the images")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	bin, err := filepath.Abs(*stamp)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	start := time.Now()
	in, err := harness.BuildK8sInputs(ctx, bin, logf)
	if err != nil {
		return err
	}
	fmt.Printf("Kubernetes %s inputs ready in %s\n", harness.K8sVersion, time.Since(start).Round(time.Second))
	fmt.Printf("  debs:   deb [signed-by=%s] %s %s\n", in.Repo.Keyring, in.Repo.FileURL(), in.Repo.Suite)
	for _, im := range in.Images {
		fmt.Printf("  image:  %s %s (%s)\n", im.Name, im.Digest, im.Layout)
	}
	return nil
}
