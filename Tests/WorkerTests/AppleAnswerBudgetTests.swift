import Testing

@testable import Shared

/// verifyReceipt answers are read whole before they are classified; with hundreds of calls in flight, what
/// they hold at once is bounded by the client's answer budget, not only each answer's own limit.
@Suite("Apple answer budget")
struct AppleAnswerBudgetTests {
    @Test("an answer within the budget is read, and each call gives its bytes back: the next call fits again")
    func budgetGivenBack() async throws {
        try await EmulatedApple.with { apple in
            let receipt = EmulatedApple.receipt(purchases: 4)
            let size = try await apple.answerSize(receipt: receipt)
            // Room for one answer, not for two.
            let client = apple.client(answerBudgetBytes: size + size / 2)
            for call in 1...3 {
                guard case .valid = await EmulatedApple.verify(client, receipt: receipt) else {
                    Issue.record("call \(call) was not read whole")
                    return
                }
            }
        }
    }

    @Test("an answer that does not fit in what the budget has left is a transport failure, retried later")
    func budgetExhausted() async throws {
        try await EmulatedApple.with { apple in
            let receipt = EmulatedApple.receipt(purchases: 4)
            let budget = try await apple.answerSize(receipt: receipt) / 2
            let verdict = await EmulatedApple.verify(apple.client(answerBudgetBytes: budget), receipt: receipt)
            guard case .retry(let detail, nil, .failed(.appleUnavailable)) = verdict else {
                Issue.record("an answer past the budget gave \(verdict), not a transport failure to retry")
                return
            }
            #expect(detail == "Production: answers being read at once would pass \(budget) bytes; tried again later")
        }
    }

    @Test("calls share the budget: while one holds most of it, another's answer is refused; once it is given back, it fits")
    func budgetShared() throws {
        let budget = AnswerBudget(bytes: 4_096)
        let first = AnswerBudget.Reservation(budget)
        let second = AnswerBudget.Reservation(budget)
        try first.take(1_000)
        try first.take(2_000)
        #expect(throws: AnswerBudget.Exhausted.self) { try second.take(3_000) }
        #expect(budget.inUse == 3_000, "a refused part takes nothing")
        first.release()
        #expect(budget.inUse == 0)
        try second.take(3_000)
        second.release()
        second.release()
        #expect(budget.inUse == 0, "giving back twice gives back once")
    }
}
