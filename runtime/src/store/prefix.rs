//! A view of a store in which every key is `prefix/key`, like PyTorch's PrefixStore: process
//! groups or jobs sharing one server each get their own key space. Prefix stores nest.

use std::time::Duration;

use super::{Result, Store};

pub struct PrefixStore<S> {
    prefix: String,
    inner: S,
}

impl<S: Store> PrefixStore<S> {
    pub fn new(prefix: impl Into<String>, inner: S) -> PrefixStore<S> {
        PrefixStore { prefix: prefix.into(), inner }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }
}

fn as_strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

impl<S: Store> Store for PrefixStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.key(key), value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.inner.get(&self.key(key))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(&self.key(key), delta)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.inner.check(&as_strs(&self.keys(keys)))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.inner.wait(&as_strs(&self.keys(keys)), timeout)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        self.inner.delete(&self.key(key))
    }
    fn num_keys(&self) -> Result<u64> {
        self.inner.num_keys()
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.append(&self.key(key), value)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.inner.multi_get(&as_strs(&self.keys(keys)))
    }
    fn multi_set(&self, pairs: &[(&str, &[u8])]) -> Result<()> {
        let keys: Vec<String> = pairs.iter().map(|(k, _)| self.key(k)).collect();
        let pairs: Vec<(&str, &[u8])> = keys.iter().map(String::as_str).zip(pairs.iter().map(|p| p.1)).collect();
        self.inner.multi_set(&pairs)
    }
}
