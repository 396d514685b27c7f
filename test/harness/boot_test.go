package harness

import (
	"runtime"
	"testing"
	"time"
)

// As many boots as the machine has cores hold a slot at once; the next
// waits until one is released.
func TestQemuSlotsAsManyAsCores(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	take := func() <-chan func() {
		got := make(chan func(), 1)
		go func() {
			release, err := qemuSlot()
			if err != nil {
				t.Error(err)
				return
			}
			got <- release
		}()
		return got
	}
	var held []func()
	for i := range runtime.NumCPU() {
		select {
		case release := <-take():
			held = append(held, release)
		case <-time.After(10 * time.Second):
			t.Fatalf("slot %d of %d not given while %d are held", i+1, runtime.NumCPU(), i)
		}
	}
	next := take()
	select {
	case release := <-next:
		release()
		t.Fatalf("a slot was given with all %d held", len(held))
	case <-time.After(time.Second):
	}
	held[0]()
	select {
	case release := <-next:
		release()
	case <-time.After(10 * time.Second):
		t.Fatal("no slot was given after one was released")
	}
	for _, release := range held[1:] {
		release()
	}
}
