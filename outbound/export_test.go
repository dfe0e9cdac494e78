package outbound

import (
	"testing"
	"time"
)

// SetReceiptSkew sets the receipt times' margin for the test, restored
// at its end.
func SetReceiptSkew(t testing.TB, d time.Duration) {
	old := receiptSkew.Swap(d.Milliseconds())
	t.Cleanup(func() { receiptSkew.Store(old) })
}
