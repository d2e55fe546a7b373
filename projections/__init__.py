"""Pure folds from a session's facts (events, entries) to views. No Django, no database."""
