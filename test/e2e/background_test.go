//go:build node

package e2e

import "testing"

// backgroundTB lets a helper written for the test's goroutine run in
// another: its Fatal and Skip fail the test and end only that goroutine,
// as FailNow may not be called from anywhere but the test's own.
type backgroundTB struct{ testing.TB }

type backgroundStop struct{}

func (b backgroundTB) Fatal(args ...any) { b.Error(args...); panic(backgroundStop{}) }
func (b backgroundTB) Fatalf(format string, args ...any) {
	b.Errorf(format, args...)
	panic(backgroundStop{})
}
func (b backgroundTB) FailNow() { b.Fail(); panic(backgroundStop{}) }
func (b backgroundTB) Skip(args ...any) {
	b.Error(append([]any{"skipped in the background:"}, args...)...)
	panic(backgroundStop{})
}
func (b backgroundTB) Skipf(format string, args ...any) {
	b.Errorf("skipped in the background: "+format, args...)
	panic(backgroundStop{})
}
func (b backgroundTB) SkipNow() { b.Skip() }

// inBackground runs fn beside the test. wait blocks until fn has ended
// and stops the test if anything failed; done only blocks, for a defer
// that keeps the test's temporary directories until fn is through with
// them, also when the test stops early.
func inBackground(t testing.TB, fn func(testing.TB)) (wait, done func()) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(backgroundStop); !ok {
					panic(r)
				}
			}
		}()
		fn(backgroundTB{t})
	}()
	done = func() { <-ended }
	wait = func() {
		done()
		if t.Failed() {
			t.FailNow()
		}
	}
	return wait, done
}
