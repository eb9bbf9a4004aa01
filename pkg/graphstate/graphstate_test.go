package graphstate

import "testing"

func TestWorkItemURL(t *testing.T) {
	for ref, want := range map[string]string{
		"github:octo/repo#15":                   "https://github.com/octo/repo/issues/15",
		"github:ghe.example.com/octo/repo#7":    "https://ghe.example.com/octo/repo/issues/7",
		"github:octo/repo#0":                    "",
		"github:octo/repo":                      "",
		"github:octo#3":                         "",
		"github:a/b/c/d#3":                      "",
		"standing:ops":                          "",
		"github:octo/re po#3":                   "",
		"github:octo/repo#12abc":                "",
		"github:ghe.example.com/octo/repo#-1":   "",
		"slack:C0LOOP:1700000000.000100":        "",
		"github:octo/repo#99999999999999999999": "",
	} {
		if got := WorkItemURL(ref); got != want {
			t.Errorf("WorkItemURL(%q) = %q, want %q", ref, got, want)
		}
	}
}
