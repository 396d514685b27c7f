package hashio

import (
	"bytes"
	"testing"
)

// A part sum is CRC-32C: the check value of the standard test input, and
// the same whether the part is summed whole or in pieces.
func TestPartSum(t *testing.T) {
	if got := PartSum([]byte("123456789")); got != "e3069283" {
		t.Fatalf("PartSum(123456789) = %s, want CRC-32C's check value e3069283", got)
	}
	data := bytes.Repeat([]byte("stamp part "), 100000)
	h := NewPartSum()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 4097)
		h.Write(rest[:n])
		rest = rest[n:]
	}
	if got, want := PartSumHex(h), PartSum(data); got != want {
		t.Fatalf("in pieces %s, whole %s", got, want)
	}
	if PartSum(nil) != "00000000" {
		t.Fatalf("PartSum(nil) = %s", PartSum(nil))
	}
}
