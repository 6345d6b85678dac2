package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// secureRecipe returns the sh blocks of README.md's "Running a secure
// cluster", in order.
func secureRecipe(t *testing.T) []string {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(data)
	start := strings.Index(text, "\n## Running a secure cluster\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no section \"Running a secure cluster\"")
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var blocks []string
	for {
		i := strings.Index(section, "\n```sh\n")
		if i < 0 {
			return blocks
		}
		section = section[i+len("\n```sh\n"):]
		j := strings.Index(section, "\n```\n")
		require.GreaterOrEqual(t, j, 0, "an sh block without its end")
		blocks = append(blocks, section[:j+1])
		section = section[j:]
	}
}

// The recipe is the test: the sh blocks of README.md's "Running a secure
// cluster" run as written, in one shell, in an empty directory with the
// binaries built (the recipe's go build line is the one thing left out: it
// builds from the repository's root). They make a two-node cluster with
// mutual TLS, -authz and an embedded etcd guarded from its first start,
// append and read as a producer by certificate and a service by token
// only, move and drain as operators (one added by a reload), and rotate a
// node's certificate; each step must succeed (set -e), and the producer's
// move must be refused.
func TestReadmeSecureRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds walnode and walctl and runs a two-node cluster")
	}
	blocks := secureRecipe(t)
	require.GreaterOrEqual(t, len(blocks), 6, "the recipe's blocks")
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "bin")+"/",
		"github.com/streamwal/streamwal/cmd/walnode", "github.com/streamwal/streamwal/cmd/walctl").CombinedOutput()
	require.NoError(t, err, "build: %s", out)

	var script strings.Builder
	// Whatever happens, the nodes the recipe started in the background
	// stop with the shell.
	script.WriteString("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n")
	for i, b := range blocks {
		script.WriteString("echo '### block " + string(rune('0'+i)) + "'\n")
		for _, line := range strings.SplitAfter(b, "\n") {
			if strings.HasPrefix(line, "go build ") {
				continue // done above, from the module
			}
			script.WriteString(line)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	if err != nil || t.Failed() {
		for _, f := range []string{"n1.log", "n2.log"} {
			data, _ := os.ReadFile(filepath.Join(dir, f))
			lines := strings.Split(string(data), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("---- %s (last lines):\n%s", f, strings.Join(lines, "\n"))
		}
	}
	t.Logf("the recipe's output:\n%s", buf.String())
	require.NoError(t, err, "the recipe failed")
	require.Contains(t, buf.String(), "refused: alice is no operator")
	require.Contains(t, buf.String(), "from-billing", "the token-only client read back what it appended")
}
