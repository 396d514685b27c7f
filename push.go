package stamp

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/layers/ociremote"
)

// PushOptions configure Push.
type PushOptions struct {
	// Insecure allows plain HTTP, and TLS without certificate checks, to a
	// registry that is not on the loopback interface. localhost and
	// 127.0.0.1 are spoken to in plain HTTP without it.
	Insecure bool
	// Keychain supplies credentials; nil means the docker config chain
	// ($DOCKER_CONFIG/config.json, ~/.docker/config.json, then podman's
	// $REGISTRY_AUTH_FILE or $XDG_RUNTIME_DIR/containers/auth.json).
	Keychain authn.Keychain
	Log      logrus.FieldLogger
	Progress Progress
}

// Push uploads the image of the OCI layout at path (a layout directory or an
// oci-archive, as stamp build writes them) to ref and returns ref's
// repository with the digest the registry now holds the image under. The
// manifest goes up byte for byte, so that digest is the layout's own: a
// registry that reports another one is an error. Publishing is a step of
// its own, never part of a build.
func Push(ctx context.Context, path, ref string, o PushOptions) (string, error) {
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return "", &UsageError{Msg: fmt.Sprintf("reference %q: %v", ref, err)}
	}
	l, err := formats.OpenOCILayout(path)
	if err != nil {
		return "", err
	}
	defer l.Close()
	if d, ok := r.(name.Digest); ok && d.DigestStr() != l.Digest() {
		return "", &UsageError{Msg: fmt.Sprintf("reference %s names digest %s, but %s holds %s", ref, d.DigestStr(), path, l.Digest())}
	}
	img, err := l.Image()
	if err != nil {
		return "", err
	}
	opts := ociremote.WriteOptions(ctx, o.Keychain, o.Insecure)
	writeOpts := append([]remote.Option{}, opts...)
	done := make(chan struct{})
	if size, err := pushSize(img); err == nil && o.Progress != nil {
		// remote.Write closes the channel when it returns.
		updates := make(chan v1.Update, 16)
		writeOpts = append(writeOpts, remote.WithProgress(updates))
		go showPushProgress(o.Progress, "push "+r.Context().Name(), size, updates, done)
	} else {
		close(done)
	}
	o.log().Infof("pushing %s (%s) to %s", path, l.Digest(), r.Name())
	err = remote.Write(r, img, writeOpts...)
	<-done
	if err != nil {
		return "", fmt.Errorf("pushing %s to %s: %w", path, r.Name(), err)
	}
	// Ask the registry what it now serves under the reference, so a
	// registry that rewrote the manifest cannot pass unnoticed.
	desc, err := remote.Head(r, opts...)
	if err != nil {
		return "", fmt.Errorf("checking %s after the push: %w", r.Name(), err)
	}
	if desc.Digest.String() != l.Digest() {
		return "", fmt.Errorf("%s now serves %s, but the layout holds %s", r.Name(), desc.Digest, l.Digest())
	}
	return r.Context().Name() + "@" + l.Digest(), nil
}

func (o *PushOptions) log() logrus.FieldLogger {
	return (&Options{Log: o.Log}).log()
}

// showPushProgress turns go-containerregistry's updates into a progress
// display until the channel is closed.
func showPushProgress(p Progress, label string, total int64, updates <-chan v1.Update, done chan<- struct{}) {
	defer close(done)
	add, finish := p(label, total)
	defer finish()
	var last int64
	for u := range updates {
		if u.Complete > last {
			add(u.Complete - last)
			last = u.Complete
		}
	}
}

// pushSize is the number of blob bytes a push may upload.
func pushSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
