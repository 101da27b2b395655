// docs/README.md is the index of the documentation (issue 45): every page of docs/ and every decision
// note of docs/decisions/ is linked from it, and every relative link of the index (and of the
// troubleshooting page it starts users on) names a file that exists. A page added without its line,
// or a page renamed under its links, fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

const fs::path kDocs = fs::path(QUILL_SOURCE_DIR) / "docs";

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The targets of the page's Markdown links that are files of this repository: no URL, no bare
// anchor; an anchor after a file name is dropped.
std::set<std::string> relative_links(const std::string& text) {
  std::set<std::string> out;
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
    std::string target = (*it)[1].str();
    if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0 || target.front() == '#') continue;
    target = target.substr(0, target.find('#'));
    out.insert(target);
  }
  return out;
}

// Every Markdown file of a folder, as a path relative to docs/.
std::set<std::string> pages(const fs::path& dir) {
  std::set<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".md") out.insert(fs::relative(e.path(), kDocs).generic_string());
  return out;
}

TEST(DocsIndex, ListsEveryPageAndDecision) {
  const std::set<std::string> links = relative_links(read_text(kDocs / "README.md"));
  std::set<std::string> all = pages(kDocs);
  for (const std::string& p : pages(kDocs / "decisions")) all.insert(p);
  all.erase("README.md");
  ASSERT_GT(all.size(), 20u) << "docs/ should hold the pages";
  for (const std::string& page : all)
    EXPECT_TRUE(links.count(page)) << "docs/README.md does not link docs/" << page << " (one line: what it answers)";
}

TEST(DocsIndex, EveryRelativeLinkResolves) {
  for (const char* page : {"README.md", "troubleshooting.md"}) {
    const std::set<std::string> links = relative_links(read_text(kDocs / page));
    EXPECT_FALSE(links.empty()) << page;
    for (const std::string& target : links)
      EXPECT_TRUE(fs::exists(kDocs / target)) << "docs/" << page << " links " << target << ", which does not exist";
  }
}

TEST(DocsIndex, TheTopLevelReadmeLinksTheIndex) {
  const std::set<std::string> links = relative_links(read_text(fs::path(QUILL_SOURCE_DIR) / "README.md"));
  EXPECT_TRUE(links.count("docs/README.md")) << "README.md should link docs/README.md";
}

}  // namespace
