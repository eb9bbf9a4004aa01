package dispatcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
)

// TestTestsRunAsTheSessionRuns: a verify-tests run happens in the session's
// checkout, without the session's endpoint token, and, when sessions are
// sandboxed, confined as the session is: it writes its own workspace and is
// refused another work item's, which the same command reads unconfined.
func TestTestsRunAsTheSessionRuns(t *testing.T) {
	root, home, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	ws := filepath.Join(root, "items", "github.com+octo+repo+7")
	other := filepath.Join(root, "items", "github.com+octo+repo+999", "notes.md")
	for _, d := range []string{ws, filepath.Dir(other)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(other, []byte("not yours\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sess := &sessions.Session{Cwd: ws, Workspace: ws}
	argv := []string{"sh", "-c", "echo token=[$LOOP_SESSION_TOKEN] && pwd && echo made > made.txt && cat " + other}
	env := map[string]string{"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s := policyService(t, Settings{Workdir: root, Workspace: WorkspaceConfig{Strategy: WorkspaceDir}, Harness: agent.Claude(), SessionEnv: env})
	out, err := s.runTests(ctx, sess, argv, time.Minute)
	if err != nil || !strings.Contains(out, "token=[]") || !strings.Contains(out, ws) || !strings.Contains(out, "not yours") {
		t.Fatalf("unconfined: %v\n%s", err, out)
	}

	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v", sandbox.ABI(), err)
	}
	loopDir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loopDir, "the-loop"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "made.txt")); err != nil {
		t.Fatal(err)
	}
	s = policyService(t, Settings{Workdir: root, Workspace: WorkspaceConfig{Strategy: WorkspaceDir}, Harness: agent.Claude(), SessionEnv: env,
		LoopBinaryDir: loopDir, Sandbox: SandboxLandlock})
	out, err = s.runTests(ctx, sess, argv, time.Minute)
	if err == nil || strings.Contains(out, "not yours") {
		t.Errorf("confined, the tests read another work item's workspace: %v\n%s", err, out)
	}
	if _, serr := os.Stat(filepath.Join(ws, "made.txt")); serr != nil {
		t.Errorf("confined, the tests could not write their own workspace: %v\n%s", serr, out)
	}
}
