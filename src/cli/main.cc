#include <cstdio>
int main() { std::puts("quill"); return 0; }
