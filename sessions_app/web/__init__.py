"""The pages: htmx views (`views`, `replay_views`) and their forms, the page query that
names what a session page shows (`page_query`), the whole-session HTML export
(`html_export`), the 429 pages of the limits (`limit_responses`) and the URLs (`urls`)."""
