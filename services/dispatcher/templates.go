package dispatcher

import (
	"sync"

	"github.com/the-loop/bus/pkg/config"

	"github.com/the-loop/bus/services/dispatcher/internal/prompt"
)

// The prompt templates in force: the process's settings when it sets them
// (tests, a host), else the operator config's routing.promptTemplate,
// routing.spawnPromptTemplate and routing.interaction.mode, read again when
// the config in force names other files or another mode.

// templates caches the templates last loaded and what they were loaded
// from.
type templates struct {
	mu   sync.Mutex
	key  [3]string
	have bool
	t    prompt.Templates
}

// templates returns the prompt templates of the config in force.
func (s *Service) templates() prompt.Templates {
	event, spawn, mode := s.set.EventTemplate, s.set.SpawnTemplate, s.set.InteractionMode
	var cfg *config.Config
	if s.deps.Config != nil {
		cfg = s.deps.Config()
	}
	if cfg != nil {
		if event == "" {
			event = cfg.Routing.Prompts.Event
		}
		if spawn == "" {
			spawn = cfg.Routing.Prompts.Spawn
		}
		if mode == "" {
			mode = string(cfg.Routing.Interaction)
		}
	}
	key := [3]string{event, spawn, mode}
	c := &s.tmpl
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.have && c.key == key {
		return c.t
	}
	m, ok := prompt.ParseMode(mode)
	if !ok {
		s.deps.Log.Warn("dispatcher: unknown interaction mode; using work-item", "mode", mode)
	}
	t, warnings := prompt.Load(event, spawn, m)
	for _, w := range warnings {
		s.deps.Log.Warn("dispatcher: prompt template unreadable", "detail", w)
	}
	c.key, c.have, c.t = key, true, t
	return t
}
