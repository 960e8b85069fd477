#pragma once
// The coordinator's live status page (served at "/"): one self-contained HTML
// document that polls "api/status" every 2 s and renders it in the browser.

namespace swarm {

const char* status_page_html();

}  // namespace swarm
