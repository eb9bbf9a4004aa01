package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	const value = "xoxb-SECRET-VALUE"
	s := NewSecret(value)
	cfg := struct {
		GitHub
		Slack
	}{GitHub{Token: NewSecret(value)}, Slack{BotToken: s}}

	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v", "%10s"} {
		outs = append(outs, fmt.Sprintf(verb, s), fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, &cfg))
	}
	outs = append(outs, fmt.Sprint(s), s.String(), s.GoString(), fmt.Sprintln(cfg))
	for _, v := range []any{s, cfg, &cfg} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(b))
	}
	text, _ := s.MarshalText()
	outs = append(outs, string(text))
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		l := slog.New(h)
		l.Info("secret", "token", s, "cfg", cfg, "ptr", &cfg)
		l.Info("secret", slog.Any("token", s))
	}
	outs = append(outs, logs.String())
	outs = append(outs, fmt.Errorf("wrapped: %v %w", s, fmt.Errorf("%s", s)).Error())

	for _, o := range outs {
		if strings.Contains(o, "SECRET") {
			t.Errorf("secret printed: %s", o)
		}
	}
	if !strings.Contains(fmt.Sprint(s), "[redacted]") || !strings.Contains(fmt.Sprint(Secret{}), "[unset]") {
		t.Errorf("set/unset not shown: %v %v", s, Secret{})
	}
	if s.Reveal() != value || !s.IsSet() || (Secret{}).IsSet() {
		t.Error("Reveal/IsSet")
	}
}
