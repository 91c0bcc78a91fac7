/** The server `svc tui` watches when neither --url nor SVC_TUI_URL names one (a local server's REST port). */
export const DEFAULT_TUI_URL = 'http://127.0.0.1:6333';
