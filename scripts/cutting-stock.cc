// The cutting-stock LP over given share counts: how few GPUs could hold them (Gilmore and
// Gomory's LP over every way to fill one GPU of 1000 milli, enumerated), its duals (the prices
// fgd-sat-pair computes from typical pods, include/gpumux/policy/share_pairing.h) and the
// configurations its solution uses. A development tool (docs/SIMULATOR.md, "fgd-sat-pair"):
//
//   g++ -O2 -std=c++20 -o cutting-stock scripts/cutting-stock.cc -lglpk
//   scripts/pairing-replay.py PLACEMENTS.csv --counts | ./cutting-stock
//
// Input on stdin: one line "milli:count milli:count ...".
#include <glpk.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main() {
  std::string line;
  std::getline(std::cin, line);
  std::istringstream in(line);
  std::vector<int> size;
  std::vector<double> count;
  for (std::string t; in >> t;) {
    const auto colon = t.find(':');
    size.push_back(std::stoi(t.substr(0, colon)));
    count.push_back(std::stod(t.substr(colon + 1)));
  }
  const int n = static_cast<int>(size.size());
  std::vector<std::vector<int>> configs;
  std::vector<int> cur(size.size(), 0);
  std::function<void(int, int)> enumerate = [&](int i, int left) {
    if (i == n) {
      for (int c : cur) {
        if (c > 0) {
          configs.push_back(cur);
          break;
        }
      }
      return;
    }
    for (int k = 0; k * size[i] <= left; ++k) {
      cur[i] = k;
      enumerate(i + 1, left - k * size[i]);
    }
    cur[i] = 0;
  };
  enumerate(0, 1000);
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_rows(lp, n);
  for (int s = 0; s < n; ++s) glp_set_row_bnds(lp, s + 1, GLP_LO, count[s], 0);
  glp_add_cols(lp, static_cast<int>(configs.size()));
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  for (int c = 0; c < static_cast<int>(configs.size()); ++c) {
    glp_set_col_bnds(lp, c + 1, GLP_LO, 0, 0);
    glp_set_obj_coef(lp, c + 1, 1);
    for (int s = 0; s < n; ++s) {
      if (configs[c][s] == 0) continue;
      ia.push_back(s + 1);
      ja.push_back(c + 1);
      ar.push_back(configs[c][s]);
    }
  }
  glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_smcp p;
  glp_init_smcp(&p);
  p.msg_lev = GLP_MSG_OFF;
  if (glp_simplex(lp, &p) != 0 || glp_get_status(lp) != GLP_OPT) {
    std::fprintf(stderr, "cutting-stock: no optimum\n");
    return 1;
  }
  std::printf("%zu ways to fill a GPU; LP: %.2f GPUs\n", configs.size(), glp_get_obj_val(lp));
  for (int s = 0; s < n; ++s) std::printf("price %d: %.4f\n", size[s], glp_get_row_dual(lp, s + 1));
  for (int c = 0; c < static_cast<int>(configs.size()); ++c) {
    const double x = glp_get_col_prim(lp, c + 1);
    if (x <= 1e-6) continue;
    std::printf("%8.2f x", x);
    for (int s = 0; s < n; ++s) {
      for (int k = 0; k < configs[c][s]; ++k) std::printf(" %d", size[s]);
    }
    std::printf("\n");
  }
  glp_delete_prob(lp);
  return 0;
}
