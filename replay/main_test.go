package replay

import (
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxtest.Main(m)
}
