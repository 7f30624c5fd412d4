// Copied from the project's shared peers (/work/shared/peers/rocks_p1.cc, 5 Dec 2026) so that
// `oncelake-bench commit --rocksdb PROGRAM` and .ci/run build the same program from this tree.
// P1's workload on RocksDB, the peer a user would pick for durable small writes from many threads.
// 1M preloaded units (random keys), then T threads for S seconds, one unit per durable write (sync=true),
// half new units and half new versions of preloaded units owned by the thread; UNITS_PER_CALL units a durable call.
// mode put: blind Put.  mode txn: TransactionDB GetForUpdate + version check + Put + Commit (the dedup check
// inside the transaction, as oncelake's commit does).
// build: g++ -O2 -std=c++17 rocks_p1.cc -lrocksdb -lpthread -o rocks_p1
#include <rocksdb/db.h>
#include <rocksdb/utilities/transaction_db.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <algorithm>
using namespace rocksdb;
static uint64_t mix(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33; return x; }
static std::string key(uint64_t u) { char b[40]; snprintf(b, sizeof b, "unit/%016llx", (unsigned long long)mix(u)); return b; }
static std::string val(uint64_t version) { std::string v(72, 'x'); memcpy(&v[0], &version, 8); return v; }
int main(int argc, char** argv) {
  if (argc < 6) { fprintf(stderr, "usage: rocks_p1 DIR put|txn THREADS SECONDS PRELOAD [UNITS_PER_CALL]\n"); return 2; }
  std::string dir = argv[1], mode = argv[2]; int T = atoi(argv[3]); double S = atof(argv[4]); uint64_t N = strtoull(argv[5], 0, 10);
  int K = argc > 6 ? atoi(argv[6]) : 1;
  Options o; o.create_if_missing = true; o.IncreaseParallelism(2);
  DB* db = nullptr; TransactionDB* tdb = nullptr; Status s;
  if (mode == "txn") { TransactionDBOptions to; s = TransactionDB::Open(o, to, dir, &tdb); db = tdb; } else s = DB::Open(o, dir, &db);
  if (!s.ok()) { fprintf(stderr, "open: %s\n", s.ToString().c_str()); return 1; }
  std::string probe;
  if (!db->Get(ReadOptions(), "preloaded", &probe).ok()) {
    for (uint64_t i = 0; i < N; i += 20000) { WriteBatch b; for (uint64_t u = i; u < std::min(N, i + 20000); u++) b.Put(key(u), val(1)); WriteOptions w; db->Write(w, &b); }
    WriteOptions w; w.sync = true; db->Put(w, "preloaded", "1"); db->Flush(FlushOptions());
  }
  std::atomic<bool> stop{false}; std::atomic<uint64_t> done{0}; std::vector<std::vector<uint32_t>> lat(T);
  auto worker = [&](int t) {
    WriteOptions w; w.sync = true; uint64_t n = 0, next_new = N + 1000000000ULL * (t + 1), upd = t; uint64_t ver = 2 + (uint64_t)time(nullptr) % 100000 * 1000;
    while (!stop.load(std::memory_order_relaxed)) {
      auto t0 = std::chrono::steady_clock::now(); Status st;
      Transaction* x = mode == "txn" ? tdb->BeginTransaction(w) : nullptr; WriteBatch b;
      for (int k = 0; k < K; k++, n++) {
        uint64_t u, v;
        if (n % 2 == 0) { u = next_new++; v = 1; } else { u = upd; upd += T; if (upd >= N) upd = t; v = ver + n; }
        if (x) {
          std::string cur; Status g = x->GetForUpdate(ReadOptions(), key(u), &cur);
          uint64_t curv = 0; if (g.ok()) memcpy(&curv, cur.data(), 8);
          if (v > curv) x->Put(key(u), val(v));
        } else b.Put(key(u), val(v));
      }
      if (x) { st = x->Commit(); delete x; } else st = db->Write(w, &b);
      if (!st.ok()) { fprintf(stderr, "write: %s\n", st.ToString().c_str()); exit(1); }
      lat[t].push_back((uint32_t)std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    }
    done += n;
  };
  auto t0 = std::chrono::steady_clock::now(); std::vector<std::thread> th;
  for (int t = 0; t < T; t++) th.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(S)); stop = true; for (auto& x : th) x.join();
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<uint32_t> all; for (auto& l : lat) all.insert(all.end(), l.begin(), l.end()); std::sort(all.begin(), all.end());
  printf("{\"system\":\"rocksdb_%s\",\"threads\":%d,\"units_per_commit\":%d,\"units_per_s\":%.0f,\"p50_us\":%u,\"p99_us\":%u}\n", mode.c_str(), T, K, done / el,
         all.empty() ? 0 : all[all.size() / 2], all.empty() ? 0 : all[all.size() * 99 / 100]);
  delete db; return 0;
}
