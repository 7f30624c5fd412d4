//! The benchmark workloads of `oncelake-bench` run small: their answers, their help, and the
//! peers. One test binary, one module per workload.

mod support;

mod commit;
mod help;
mod rocksdb;
mod seed001;
mod serve_load;
mod stage;
mod via_server;
